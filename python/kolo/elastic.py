"""Horovod Elastic's contract on kolo, framework-neutral: the exceptions, the
State base class, ObjectState, the retry loop ``run_fn`` and the ``run``
decorator (kolo.torch.elastic adds TorchState and ElasticSampler;
kolo.tensorflow.elastic TensorFlowKerasState and TensorFlowState).

How kolo's elastic jobs work (kolo.h, namespace kolo::elastic): kolorun
--min-np/--max-np publishes numbered *generations* of the job; ``init()`` joins
the newest one that lists this process and forms a communicator among exactly
its members. A communicator never changes: when a peer is lost every survivor's
collective raises KoloError and the communicator is dead for good; when workers
are added, a newer generation is published and ``check_host_updates()`` makes
every rank raise HostsUpdatedInterrupt together. Either way the process
re-forms (``shutdown()`` then ``init()``) and the state is synchronised again.
"""
import ctypes
import functools
import pickle

from kolo import _C, basics, settings

KoloError = _C.Error
# Horovod's name for a failed collective (kolo raises KoloError; also kolo.torch's).
HorovodInternalError = KoloError


class HostsUpdatedInterrupt(RuntimeError):
    """Workers were added to or removed from the job (a newer generation was
    published): every rank raises it at the same check_host_updates(), and
    ``run`` re-forms without restoring the committed state.

    ``skip_sync``: Horovod's flag — the re-formed ranks may skip the sync
    (kolo never sets it: a generation does not say whether workers only left)."""

    def __init__(self, skip_sync=False, message="the job's workers changed"):
        super().__init__(message)
        self.skip_sync = skip_sync


def elastic_job():
    """True when elastic kolorun started this process (KOLO_WORKER_ID is set)."""
    return _C.elastic_enabled()


class State:
    """What a training process must keep across re-formations.

    Subclasses implement save() (keep a copy of the state in memory),
    restore() (go back to that copy) and sync() (make every rank's state the
    root's). ``bcast_object(obj, root_rank=...)`` broadcasts a Python object
    (kolo's framework-neutral one by default); ``get_rank`` is accepted for
    Horovod's signature (kolo asks its communicator)."""

    def __init__(self, bcast_object=None, get_rank=None):
        self._bcast_object = bcast_object or broadcast_object
        self._get_rank = get_rank or basics.rank
        self._reset_callbacks = []
        # False once this process holds a state that was synced or committed:
        # a worker that just joined must never be the root of a sync.
        self._fresh = True

    def register_reset_callbacks(self, callbacks):
        """Functions called (in order, no arguments) after every re-formation,
        before the sync, e.g. to scale the learning rate with the new size()."""
        callbacks = list(callbacks)
        for cb in callbacks:
            if not callable(cb):
                raise TypeError(f"kolo elastic: register_reset_callbacks: {cb!r} is not callable")
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        self.reset()
        for cb in self._reset_callbacks:
            cb()

    def commit(self):
        """save(), then check_host_updates(): a commit is where added workers join."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self):
        """Raises HostsUpdatedInterrupt on every rank when kolorun has published a
        newer generation than this communicator's. Collective in an elastic job
        (rank 0 asks the store and broadcasts the answer, so all ranks agree);
        outside one it does nothing and never raises."""
        if not elastic_job():
            return
        c = basics.comm_of_world()
        latest = ctypes.c_int64(_C.elastic_latest_generation(c) if c.rank() == 0 else -1)
        c.broadcast(ctypes.addressof(latest), 1, _C.I64, 0)
        mine = _C.elastic_generation(c)
        if latest.value > mine:
            raise HostsUpdatedInterrupt(False, f"kolo elastic: the job's workers changed (this "
                                        f"communicator is generation {mine}, the newest {latest.value})")

    def sync_root(self):
        """The rank whose state sync() sends: the lowest rank that held state
        before this re-formation (rank 0 when none did, as at the start). Horovod
        always sends rank 0's, which is right only if rank 0 never just joined."""
        if not elastic_job():
            return 0
        c = basics.comm_of_world()
        mine = ctypes.c_uint8(1 if self._fresh else 0)
        every = (ctypes.c_uint8 * c.size())()
        c.allgather(ctypes.addressof(mine), ctypes.addressof(every), 1, _C.U8)
        return next((r for r, fresh in enumerate(every) if not fresh), 0)

    def synced(self):
        """Subclasses call it at the end of sync(): this rank now holds the job's state."""
        self._fresh = False

    def save(self):
        raise NotImplementedError("kolo elastic: State subclasses implement save()")

    def restore(self):
        raise NotImplementedError("kolo elastic: State subclasses implement restore()")

    def sync(self):
        raise NotImplementedError("kolo elastic: State subclasses implement sync()")

    def reset(self):
        """Called after a re-formation, before the callbacks and the sync."""


class ObjectState(State):
    """Plain Python values kept across re-formations, given as keyword
    arguments and exposed as attributes (``state.epoch``).

    save() copies the current values (by reference, as Horovod does: assign
    new objects rather than mutating saved ones); restore() puts them back;
    sync() sends the root's current values and saves them on every rank."""

    def __init__(self, bcast_object=None, get_rank=None, **kwargs):
        super().__init__(bcast_object, get_rank)
        self._saved_state = dict(kwargs)
        self._set_attrs()

    def save(self):
        self._saved_state = {name: getattr(self, name) for name in self._saved_state}
        self._fresh = False

    def restore(self):
        self._set_attrs()

    def sync(self):
        self._sync_values(self.sync_root())
        self.synced()

    def _sync_values(self, root):
        if self._saved_state:  # the same names on every rank: all skip or none
            current = {name: getattr(self, name) for name in self._saved_state}
            self._saved_state = self._bcast_object(current, root_rank=root)
            self._set_attrs()

    def _set_attrs(self):
        for name, value in self._saved_state.items():
            setattr(self, name, value)


def broadcast_object(obj, root_rank=0):
    """root_rank's object (pickled) on every rank of the global communicator."""
    c = basics.comm_of_world()
    payload = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL) if c.rank() == root_rank else b""
    length = ctypes.c_int64(len(payload))
    c.broadcast(ctypes.addressof(length), 1, _C.I64, root_rank)
    buf = bytearray(payload) if c.rank() == root_rank else bytearray(length.value)
    if buf:
        c.broadcast(ctypes.addressof((ctypes.c_char * len(buf)).from_buffer(buf)), len(buf), _C.U8, root_rank)
    return obj if c.rank() == root_rank else pickle.loads(buf)


def _reset_limit(reset_limit):
    """run_fn's argument, else KOLO_ELASTIC_RESET_LIMIT, else None (no limit)."""
    where = "reset_limit"
    if reset_limit is None and settings.elastic_reset_limit() is not None:
        reset_limit, where = settings.elastic_reset_limit(), "KOLO_ELASTIC_RESET_LIMIT"
        try:
            reset_limit = int(reset_limit)
        except ValueError:
            raise ValueError(f"kolo elastic: {where}={reset_limit!r} is not an integer") from None
    if reset_limit is None:
        return None
    if isinstance(reset_limit, bool) or not isinstance(reset_limit, int) or reset_limit < 0:
        raise ValueError(f"kolo elastic: {where} must be a whole number >= 0, not {reset_limit!r}")
    return reset_limit


def _recoverable(e):
    """A lost peer or a timeout kills the communicator: re-forming helps. An
    error every rank rejected (a mismatch: the program's bug) leaves it usable
    and would only happen again, so it is not retried."""
    return basics.REJECTED not in str(e)


def run_fn(func, reset, reset_limit=None):
    """Wraps ``func(state, ...)`` in Horovod's retry loop: sync the state, run
    func; on a failed collective (KoloError) restore the last commit, re-form
    with ``reset()`` and go again; on HostsUpdatedInterrupt re-form without
    restoring. After each re-formation: state.on_reset(), then the sync.

    Outside an elastic job nothing is retried: errors propagate as they are.
    ``reset_limit``: the most re-formations (default KOLO_ELASTIC_RESET_LIMIT,
    else no limit); one more failure is a KoloError chained to it."""
    if not callable(func) or not callable(reset):
        raise TypeError("kolo elastic: run_fn(func, reset) takes two callables")
    limit = _reset_limit(reset_limit)

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        if not isinstance(state, State):
            raise TypeError(f"kolo elastic: {func.__name__}'s first argument must be a "
                            f"kolo.elastic.State (TorchState, ObjectState), not {type(state).__name__}")
        resets, skip_sync = 0, False
        while True:
            try:
                if not skip_sync:
                    state.sync()
                return func(state, *args, **kwargs)
            except HostsUpdatedInterrupt as e:
                if not elastic_job():
                    raise
                skip_sync, cause = e.skip_sync, e
            except KoloError as e:
                if not elastic_job() or not _recoverable(e):
                    raise
                state.restore()
                skip_sync, cause = False, e
            if limit is not None and resets >= limit:
                raise KoloError(f"kolo elastic: giving up after {resets} re-formation(s) "
                                f"(reset limit {limit}): {cause}") from cause
            resets += 1
            reset()
            state.on_reset()
    return wrapper


def reform():
    """Leaves the failed (or outdated) communicator and joins the newest
    generation of the job (blocks until kolorun publishes one listing us)."""
    basics.shutdown()
    basics.init()


def run(func):
    """Horovod's decorator: ``func(state, ...)`` runs with its state synced
    from the root first, and again after every re-formation (a lost peer:
    restore the last commit; added workers: keep the current state).

    Do not issue collectives before calling the decorated function: a worker
    that joins later would not issue them."""
    return run_fn(func, reform)
