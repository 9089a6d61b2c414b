"""The process's communicator and the who-am-I queries (Horovod's basics).

One communicator per process, created by ``init()`` (collective over the
job: kolorun, mpirun, srun or torchrun variables) and dropped by
``shutdown()``. Which ranks share a host (local_rank, local_size, cross_rank,
cross_size) is kolo's C++ init's answer (kolo.h), never decided here.
"""
import atexit
import os
import threading

from kolo import _C, settings

_comm = None


class _Scope(threading.local):
    """The process set a collective is being issued on (kolo/process_sets.py):
    comm() answers its communicator while set; None means the global one."""
    comm = None
    process_set = None


scope = _Scope()


def init(comm=None, process_sets=None):
    """Joins the job (collective). Calling it again while initialised does nothing.

    ``process_sets``: Horovod's list of ProcessSets to register (every rank
    passes the same list; kolo/process_sets.py). Horovod's ``comm`` (an MPI
    communicator) is accepted only as None.
    """
    global _comm
    if comm is not None:
        raise ValueError("kolo: init(comm=...) is not supported; kolo's communicator spans all "
                         "ranks of the job (use process_sets= for subsets)")
    if _comm is not None:
        return
    _comm = _C.init()
    global _serial
    _serial += 1
    from kolo import process_sets as sets
    sets.init_process_sets(process_sets)
    _line_buffered_under_kolorun()


def _line_buffered_under_kolorun():
    """As kolo's C++ init does for C's stdout: under kolorun stdout is a pipe
    to its relay, so flush Python's by line and ranks' prints show up as made."""
    import sys
    if settings.kolorun_var("KOLO_RANK") is not None and hasattr(sys.stdout, "reconfigure") and not sys.stdout.isatty():
        try:
            sys.stdout.reconfigure(line_buffering=True)
        except (ValueError, OSError):  # a replaced or closed stdout: leave it alone
            pass


def shutdown():
    """Drops the communicator (after pending operations finish). init() may follow.

    After a failed collective (a lost peer) it returns within seconds and
    raises nothing: pending operations fail at once, and the timeline's merge
    waits only briefly for ranks that may be gone (src/report/timeline_writer.cc)."""
    global _comm
    c, _comm = _comm, None
    if c is not None:
        from kolo import handles, process_sets
        handles.drain()
        try:
            _C.timeline_stop()  # writes the file while the communicator is up (nothing when off)
        except _C.Error:
            if not c.failed():
                raise
        process_sets.reset_process_sets()
        c.close()


# The end of the text of an error that every rank rejected (src/comm/context.cc):
# such a communicator remains usable; after any other kolo error it is not.
REJECTED = "the communicator remains usable"

_serial = 0  # communicators this process has formed (init() calls)


def communicator_serial():
    """Counts init()s: state tied to a communicator (a DistributedOptimizer's
    half-issued step) compares it to see that the communicator was replaced."""
    return _serial


def start_timeline(file_path, mark_cycles=False):
    """Horovod's: records every collective of every rank into file_path, a
    Chrome-trace JSON (Perfetto, chrome://tracing), written at stop_timeline()
    or shutdown(). Collective: every rank calls it. ``mark_cycles`` is accepted
    and ignored (kolo has no negotiation cycles to mark). An unwritable path is
    a kolo error naming it; starting twice is an error."""
    _C.timeline_start(comm_of_world(), os.fspath(file_path))


def stop_timeline():
    """Horovod's: stops recording and writes the file (collective; nothing when off)."""
    _C.timeline_stop()


atexit.register(shutdown)


def is_initialized():
    return _comm is not None


def comm():
    """The communicator of the process set being issued on (see ``scope``),
    else the global one; a clear error before init()."""
    return scope.comm or comm_of_world()


def comm_of_world():
    """The global communicator (all ranks); a clear error before init()."""
    if _comm is None:
        raise ValueError("kolo has not been initialized; call hvd.init() first")
    return _comm


def rank():
    return comm_of_world().rank()


def size():
    return comm_of_world().size()


def local_rank():
    return comm_of_world().local_rank()


def local_size():
    return comm_of_world().local_size()


def cross_rank():
    """Index of this rank's host among the job's hosts (0 on one host)."""
    return comm_of_world().cross_rank()


def cross_size():
    """Number of hosts in the job."""
    return comm_of_world().cross_size()


def transport():
    """"self" (one rank), "shm" (one host), "tcp" (a flat TCP mesh) or "hier"
    (several hosts: shared memory within each, TCP between them)."""
    return comm_of_world().transport()


def error(what, message):
    """A ValueError/TypeError text in kolo's style: names the rank and the call."""
    r = _comm.rank() if _comm is not None else None
    where = f"kolo rank {r}" if r is not None else "kolo"
    return f"{where}: {what}: {message}"
