"""The process's communicator and the who-am-I queries (Horovod's basics).

One communicator per process, created by ``init()`` (collective over the
job: kolorun, mpirun, srun or torchrun variables) and dropped by
``shutdown()``. Which ranks share a host (local_rank, local_size, cross_rank,
cross_size) is kolo's C++ init's answer (kolo.h), never decided here.
"""
import atexit
import os

from kolo import _C

_comm = None


def init(comm=None, process_sets=None):
    """Joins the job (collective). Calling it again while initialised does nothing.

    Horovod's ``comm`` and ``process_sets`` arguments are accepted only with
    their defaults: kolo has one communicator over all ranks.
    """
    global _comm
    if comm is not None or process_sets is not None:
        raise ValueError("kolo: init(comm=..., process_sets=...) is not supported; "
                         "kolo uses one communicator over all ranks")
    if _comm is not None:
        return
    _comm = _C.init()
    _line_buffered_under_kolorun()


def _line_buffered_under_kolorun():
    """As kolo's C++ init does for C's stdout: under kolorun stdout is a pipe
    to its relay, so flush Python's by line and ranks' prints show up as made."""
    import sys
    if "KOLO_RANK" in os.environ and hasattr(sys.stdout, "reconfigure") and not sys.stdout.isatty():
        try:
            sys.stdout.reconfigure(line_buffering=True)
        except (ValueError, OSError):  # a replaced or closed stdout: leave it alone
            pass


def shutdown():
    """Drops the communicator (after pending operations finish). init() may follow."""
    global _comm
    c, _comm = _comm, None
    if c is not None:
        from kolo import handles
        handles.drain()
        c.close()


atexit.register(shutdown)


def is_initialized():
    return _comm is not None


def comm():
    """The communicator; a clear error before init()."""
    if _comm is None:
        raise ValueError("kolo has not been initialized; call hvd.init() first")
    return _comm


def rank():
    return comm().rank()


def size():
    return comm().size()


def local_rank():
    return comm().local_rank()


def local_size():
    return comm().local_size()


def cross_rank():
    """Index of this rank's host among the job's hosts (0 on one host)."""
    return comm().cross_rank()


def cross_size():
    """Number of hosts in the job."""
    return comm().cross_size()


def transport():
    """"self" (one rank), "shm" (one host), "tcp" (a flat TCP mesh) or "hier"
    (several hosts: shared memory within each, TCP between them)."""
    return comm().transport()


def error(what, message):
    """A ValueError/TypeError text in kolo's style: names the rank and the call."""
    r = _comm.rank() if _comm is not None else None
    where = f"kolo rank {r}" if r is not None else "kolo"
    return f"{where}: {what}: {message}"
