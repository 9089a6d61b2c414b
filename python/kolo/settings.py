"""Every environment variable kolo's Python reads, named once (kolo's C++
reads its own through src/core/config.h, and Python's tunables reach the
core through it): the launchers' variables the fronts look at beside kolo's
init, and the settings only Python has. Nothing else in kolo's Python reads
os.environ (tests/layout checks it)."""
import contextlib
import os


# --- kolorun's variables (tools/kolorun/rank_env.h) --------------------------
def kolorun_var(name):
    """KOLO_RANK, KOLO_SIZE, KOLO_LOCAL_RANK, KOLO_LOCAL_SIZE: what kolorun gave
    this rank ("" or None where it gave nothing)."""
    if name not in ("KOLO_RANK", "KOLO_SIZE", "KOLO_LOCAL_RANK", "KOLO_LOCAL_SIZE"):
        raise ValueError(f"kolo.settings: {name} is not one of kolorun's rank variables")
    return os.environ.get(name)


def started_by_kolorun():
    """kolo's discovery takes kolorun's variables when either of these is set."""
    return bool(os.environ.get("KOLO_RANK") or os.environ.get("KOLO_SIZE"))


def store_named():
    """Whether kolo's discovery knows its store without torch's help: kolorun
    started the rank, or KOLO_STORE_ADDR names the store."""
    return bool(os.environ.get("KOLO_RANK") or os.environ.get("KOLO_STORE_ADDR"))


def secret():
    """KOLO_SECRET, the job's key (rendezvous/discovery.h); None where unset."""
    return os.environ.get("KOLO_SECRET") or None


# --- torch's launch variables ------------------------------------------------
def master_addr():
    return os.environ.get("MASTER_ADDR") or None


def master_port():
    return os.environ.get("MASTER_PORT") or None


def torchelastic_restart_count():
    """torchrun's restart round ("0" outside torchrun)."""
    return os.environ.get("TORCHELASTIC_RESTART_COUNT") or "0"


# --- settings of kolo's Python -------------------------------------------------
def elastic_reset_limit():
    """KOLO_ELASTIC_RESET_LIMIT as written (kolo.elastic.run_fn checks it); None where unset."""
    return os.environ.get("KOLO_ELASTIC_RESET_LIMIT") or None


@contextlib.contextmanager
def changed(changes):
    """The environment with `changes` applied (a value of None removes the
    variable) for the body of the with-statement, for kolo's C++ init to read;
    restored afterwards."""
    saved = {k: os.environ.get(k) for k in changes}
    try:
        _put(changes)
        yield
    finally:
        _put(saved)


def _put(variables):
    for k, v in variables.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
