"""Horovod-style integer handles for asynchronous collectives.

A handle owns the kolo Work, every buffer the C++ side reads or writes (kept
alive until the Work completes) and a ``finish`` callable that turns the
completed buffers into the result (copy back, scale, decompress, trim).
kolo runs unnamed collectives in the order they were issued and named ones
as soon as every rank has issued them, so handles may be synchronized in any
order (but a named allgather's data moves at its synchronize: torch/collectives.py).
"""
import itertools

_pending = {}
_ids = itertools.count(1)


class _Entry:
    __slots__ = ("work", "keep", "finish")

    def __init__(self, work, keep, finish):
        self.work = work
        self.keep = keep
        self.finish = finish


def add(work, keep, finish):
    """Registers an issued collective; returns its handle."""
    h = next(_ids)
    _pending[h] = _Entry(work, keep, finish)
    return h


def _entry(handle):
    e = _pending.get(handle)
    if e is None:
        raise ValueError(f"kolo: handle {handle!r} is unknown or was already synchronized")
    return e


def poll(handle):
    """True when the collective behind handle has completed (raises its error)."""
    e = _entry(handle)
    return e.work is None or e.work.test()


def synchronize(handle):
    """Waits for the collective and returns its result; the handle is spent."""
    e = _entry(handle)
    try:
        if e.work is not None:
            e.work.wait()
    finally:
        del _pending[handle]
    return e.finish()


def drain():
    """Waits for every outstanding collective (shutdown); errors are dropped."""
    for h in list(_pending):
        try:
            synchronize(h)
        except Exception:  # the communicator goes away anyway
            pass
