"""Horovod's process sets on kolo: collectives over a subset of the ranks.

A registered ProcessSet holds a kolo sub-communicator over its ranks
(``Communicator.subgroup``, collective over all ranks when the set is
registered), so its collectives run on their own engine and transport and
never involve, or wait for, ranks outside it; disjoint sets run at the same
time. Horovod's semantics, which kolo follows:
  * ``ProcessSet(ranks)`` sorts its ranks; it is usable once registered by
    ``hvd.init(process_sets=[...])`` or ``hvd.add_process_set(...)``, which
    every rank calls with the same sets in the same order. kolo needs no
    HOROVOD_DYNAMIC_PROCESS_SETS for adding sets after init.
  * ``root_rank`` of broadcast is the GLOBAL rank of the root (a member of
    the set); ``ProcessSet.rank()`` is the rank within the set (-1 outside).
  * A collective on a set this rank is not in raises ValueError (Horovod's
    InvalidArgument "Rank R is not a member of the provided process set").
  * ``remove_process_set`` never removes the global set (returns False);
    a removed set's objects are invalidated.

The collectives take ``process_set=`` through ``with_process_set``: for the
duration of the call, ``kolo.basics.comm()`` answers the set's communicator.
A differentiable collective's backward runs on the set its forward ran on
(``follows_process_set``).
"""
import contextlib
import functools
import inspect

from kolo import basics


class ProcessSet:
    """A set of ranks that run collectives together (Horovod's ProcessSet)."""
    process_set_id = None
    ranks = None

    def __init__(self, ranks):
        try:
            ranks = sorted(ranks)
        except TypeError:
            raise ValueError("kolo: ProcessSet needs a list of process ranks") from None
        if any(not isinstance(r, int) or isinstance(r, bool) for r in ranks):
            raise ValueError(f"kolo: ProcessSet needs a list of integer ranks, got {ranks!r}")
        self.ranks = ranks
        self._comm = None  # this rank's sub-communicator, once registered (None outside the set)

    def _invalidate(self):
        self.process_set_id = None
        self._comm = None

    def size(self):
        """Number of ranks in the set, or None if not registered."""
        return None if self.process_set_id is None else len(self.ranks)

    def rank(self):
        """This rank's index in the set (-1 when not in it), or None if not registered.

        As in Horovod, collectives take global ranks (root_rank of broadcast), not this one."""
        if self.process_set_id is None:
            return None
        me = basics.rank()
        return self.ranks.index(me) if me in self.ranks else -1

    def included(self):
        """Whether this rank is in the set, or None if the set has no ranks yet."""
        if self.ranks is None:
            return None
        return basics.rank() in self.ranks

    def __str__(self):
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks})"

    __repr__ = __str__


global_process_set = ProcessSet([])
global_process_set.process_set_id = 0

_by_id = {0: global_process_set}
_next_id = 1


def _register(ps, what):
    """Makes ps's sub-communicator (collective over all ranks) and gives it an id."""
    global _next_id
    world = basics.comm_of_world()
    n = world.size()
    bad = [r for r in ps.ranks if r < 0 or r >= n]
    if bad or not ps.ranks or len(set(ps.ranks)) != len(ps.ranks):
        raise ValueError(basics.error(what, f"{ps} must hold distinct ranks of 0..{n - 1}"))
    for other in _by_id.values():
        if other.process_set_id and other.ranks == ps.ranks:
            raise ValueError(basics.error(what, f"Attempted to add a duplicate process set: {ps} "
                                          f"(ranks already registered as id {other.process_set_id})"))
    sub = world.subgroup(ps.ranks)
    ps._comm = sub if sub.valid() else None
    ps.process_set_id = _next_id
    _by_id[_next_id] = ps
    _next_id += 1


def init_process_sets(process_sets):
    """hvd.init's process_sets: a list of ProcessSets (or "dynamic", which kolo needs not)."""
    global_process_set.ranks = list(range(basics.comm_of_world().size()))
    if process_sets is None or process_sets == "dynamic":
        return
    for ps in process_sets:
        if not isinstance(ps, ProcessSet):
            raise ValueError(basics.error("init", f"process_sets must hold ProcessSet objects, got {ps!r}"))
        _register(ps, "init")


def reset_process_sets():
    """At shutdown: every set but the global one is gone."""
    global _next_id
    for pid, ps in list(_by_id.items()):
        if pid:
            ps._invalidate()
            del _by_id[pid]
    _next_id = 1
    global_process_set.ranks = []


def add_process_set(process_set):
    """Registers a ProcessSet (or a list of ranks) after init; collective over all ranks,
    which pass the same sets in the same order. Returns the ProcessSet."""
    basics.comm_of_world()
    ps = process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)
    if ps.process_set_id is not None:
        raise ValueError(basics.error("add_process_set", f"{ps} is already registered"))
    _register(ps, "add_process_set")
    return ps


def remove_process_set(process_set):
    """Unregisters a process set (and invalidates it); False for the global
    set, an unregistered one or one already removed."""
    pid = process_set.process_set_id
    if not pid:
        return False
    process_set._invalidate()
    registered = _by_id.pop(pid, None)
    if registered is None:
        return False
    registered._invalidate()
    return True


def communicator(process_set, what):
    """The kolo communicator of process_set (None: the global one) for this rank."""
    if process_set is None or process_set is global_process_set:
        return basics.comm_of_world()
    if not isinstance(process_set, ProcessSet):
        raise ValueError(basics.error(what, f"process_set must be a ProcessSet, got {process_set!r}"))
    if process_set.process_set_id is None or _by_id.get(process_set.process_set_id) is not process_set:
        raise ValueError(basics.error(what, f"{process_set} is not registered (hvd.add_process_set or "
                                      "hvd.init(process_sets=...))"))
    if process_set._comm is None:
        raise ValueError(basics.error(what, f"rank {basics.rank()} is not a member of the provided "
                                      f"process set (ranks {process_set.ranks})"))
    return process_set._comm


@contextlib.contextmanager
def on_process_set(process_set, what):
    """Within the block, kolo.basics.comm() is process_set's communicator."""
    c = communicator(process_set, what)
    saved = basics.scope.comm, basics.scope.process_set
    basics.scope.comm, basics.scope.process_set = c, process_set
    try:
        yield c
    finally:
        basics.scope.comm, basics.scope.process_set = saved


def root_in_scope(root_rank, what):
    """A collective's root_rank (a global rank, as in Horovod) as a rank of the
    communicator it runs on."""
    ps = basics.scope.process_set
    if ps is None or ps is global_process_set:
        return int(root_rank)
    try:
        return ps.ranks.index(int(root_rank))
    except ValueError:
        raise ValueError(basics.error(what, f"root_rank {root_rank} is not a member of the process "
                                      f"set (ranks {ps.ranks})")) from None


def with_process_set(fn):
    """Runs fn (which has a process_set parameter) on that process set.

    process_set=None leaves the current one (the global set at top level), so
    a collective built of others (grouped_*) runs them all on its own set."""
    index = list(inspect.signature(fn).parameters).index("process_set")

    @functools.wraps(fn)
    def run(*args, **kwargs):
        ps = args[index] if len(args) > index else kwargs.get("process_set")
        if ps is None:
            return fn(*args, **kwargs)
        with on_process_set(ps, fn.__name__):
            return fn(*args, **kwargs)
    return run


def follows_process_set(function_class):
    """A torch.autograd.Function whose backward runs on the process set its forward ran on."""
    forward, backward = function_class.forward, function_class.backward

    def forward_in_scope(ctx, *args):
        ctx.kolo_scope = basics.scope.comm, basics.scope.process_set
        return forward(ctx, *args)

    def backward_in_scope(ctx, *grads):
        saved = basics.scope.comm, basics.scope.process_set
        basics.scope.comm, basics.scope.process_set = ctx.kolo_scope
        try:
            return backward(ctx, *grads)
        finally:
            basics.scope.comm, basics.scope.process_set = saved
    function_class.forward = staticmethod(forward_in_scope)
    function_class.backward = staticmethod(backward_in_scope)
    return function_class
