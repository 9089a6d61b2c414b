"""DistributedOptimizer: Horovod's wrapper that averages gradients over ranks.

A thin adapter over kolo's reducer (include/kolo/reducer.h, kolo._C.Reducer),
which owns the gradient path of every front: buckets in reverse parameter
order (a first bucket of FIRST_BUCKET_BYTES so that communication starts
early, then the fusion threshold: KOLO_FUSION_THRESHOLD or
HOROVOD_FUSION_THRESHOLD, else 25 MiB), issued strictly in bucket order as
their gradients become ready, fused, compressed, scaled, accumulated over
backward_passes_per_step, and Horovod's join() vote and shadow steps. What
lives here: the hooks on the gradient accumulators (each counts a pass and,
at the last, hands the gradient to the reducer), tensor views, and writing
the results back to p.grad.

How a step runs (the same on every rank, so kolo's call-order matching holds):
  * A hook on each parameter's gradient accumulator counts backward passes;
    after backward_passes_per_step of them the gradient is handed over and
    the buckets complete by then start their allreduce while backward goes
    on. A bucket of one gradient (every parameter above the cap) is reduced
    where it lies, in p.grad, as Horovod does: no copy in or out.
  * Each step's first allreduce is a one-element vote "1 if this rank steps".
    A rank that has called join() answers it with 0 and mirrors the step's
    buckets with zeros, so ranks with more batches can go on; the vote's sum
    — the number of ranks that really stepped — is the divisor of op=Average.
  * synchronize() (called by step()) hands over what is left (gradients that
    never arrived count as zeros, as in Horovod), waits, and writes the
    averaged gradients back to p.grad.
Gradient = sum over active ranks of (grad / gradient_predivide_factor),
times gradient_predivide_factor / active_ranks for Average (Sum: the plain
sum). Gradients accumulated over backward_passes_per_step are summed, not
averaged (as in Horovod: scale the loss if you want an average).
"""
import contextlib
import weakref

import torch

from kolo import _C, basics
from kolo.basics import comm, error
from kolo.process_sets import communicator, with_process_set
from kolo.torch import dtypes
from kolo.torch.collectives import named_issued, steps_taken
from kolo.torch.compression import Compression
from kolo.torch.dtypes import Average

FIRST_BUCKET_BYTES = 1 << 20
BUCKET_BYTES = None  # None: the fusion threshold setting, else 25 MiB (as DDP's bucket_cap_mb)
DEFAULT_BUCKET_BYTES = 25 << 20

_latest = None  # weakref to the newest DistributedOptimizer (join() mirrors its buckets)
_ACCUMULATE, _FINAL, _EXTRA = 0, 1, 2  # kolo._C.Reducer.arrived()


def latest_optimizer():
    return _latest() if _latest is not None else None


def _wire_code(compression):
    """The compressed dtype's code, or -1 when the compression keeps the dtype."""
    sent, _ = compression.compress(torch.zeros(1, dtype=torch.float32))
    return -1 if sent.dtype == torch.float32 else dtypes._NATIVE[sent.dtype]


class _DistributedOptimizer(torch.optim.Optimizer):
    def __init__(self, params, named_parameters, compression, backward_passes_per_step=1,
                 op=Average, gradient_predivide_factor=1.0, groups=None, sparse_as_dense=False,
                 process_set=None):
        super(self.__class__, self).__init__(params)
        what = "DistributedOptimizer"
        self._what = what
        self._process_set = process_set
        # As in Horovod, on a rank outside the process set this is the plain
        # optimizer: no hooks, nothing reduced, step() applies the local gradients.
        self._included = process_set is None or bool(process_set.included())
        if self._included:
            self._comm()  # an unregistered set: the error now, not at the first step
        code = dtypes.op_code(what, op)
        if code not in (_C.SUM, _C.AVERAGE):
            raise ValueError(error(what, f"op {op!r} is not supported (Average or Sum)"))
        if gradient_predivide_factor != 1.0 and code != _C.AVERAGE:
            raise ValueError(error(what, "gradient_predivide_factor needs op=Average"))
        if backward_passes_per_step < 1:
            raise ValueError(error(what, "backward_passes_per_step must be at least 1"))
        self._op = code
        self._predivide = float(gradient_predivide_factor)
        self._compression = compression or Compression.none
        self.backward_passes_per_step = backward_passes_per_step
        self._sparse_as_dense = sparse_as_dense

        all_params = [p for g in self.param_groups for p in g["params"]]
        self._names = self._name_parameters(named_parameters, all_params)
        self._parameter_names = self._names  # Horovod's attribute: {parameter: name}
        self._params = [p for p in all_params if p.requires_grad]
        for p in self._params:
            dtypes.check_tensor(what, p, self._names.get(p))
            if not p.is_floating_point():
                raise TypeError(error(what, f"parameter '{self._names.get(p)}' has dtype {p.dtype}; "
                                      "gradients need a floating dtype"))
        self._should_synchronize = True
        self._synchronized = False
        self._serial = basics.communicator_serial()
        self._held = {}  # gradients handed over this step (the reducer reads them until finish())
        self._grad_accs = []
        self._reducer = self._make_reducer() if self._included else None
        if self._included:
            self._register_hooks()
        global _latest
        _latest = weakref.ref(self)

    @property
    def _buckets(self):
        """The layout, in parameters: bucket i holds _buckets[i], in order (the
        reducer's now: KOLO_AUTOTUNE changes it during the first steps)."""
        return [[self._params[i] for i in b] for b in self._reducer.buckets()] if self._reducer is not None else []

    def _make_reducer(self):
        entries = []
        # The streams the reducer queues its work on (each CUDA parameter's
        # current one now): per parameter (_hand_over), each once (_order_streams).
        self._stream_of = [torch.cuda.current_stream(p.device) if p.is_cuda else None for p in self._params]
        self._streams = {s for s in self._stream_of if s is not None}
        for p in self._params:
            place = dtypes.place(p)
            entries.append((p.numel(), dtypes._NATIVE[p.dtype], place.get("device", -1), place.get("stream", 0)))
        bucket = BUCKET_BYTES if BUCKET_BYTES is not None else _C.fusion_threshold(DEFAULT_BUCKET_BYTES)
        # Horovod's predivide: prescale 1/f, postscale f, with op Average.
        pre = self._predivide
        return _C.Reducer(self._comm(), entries, bucket, FIRST_BUCKET_BYTES, self._op,
                          prescale=1.0 / pre, postscale=pre, wire=_wire_code(self._compression),
                          passes=self.backward_passes_per_step, vote_each_step=True,
                          timeline_category="torch", what=self._what)

    def _comm(self):
        """The communicator of the optimizer's process set (the global one by default)."""
        return communicator(self._process_set, self._what)

    # ---- set-up ------------------------------------------------------------------
    def _name_parameters(self, named_parameters, all_params):
        if named_parameters is None:  # Horovod's names: group i, parameter j
            return {p: f"allreduce.noname.{i}.{j}" for i, g in enumerate(self.param_groups)
                    for j, p in enumerate(g["params"])}
        named = list(named_parameters)
        if any(not isinstance(x, tuple) or len(x) != 2 for x in named):
            raise ValueError(error(self._what, "named_parameters must be (name, parameter) pairs, "
                                   "as model.named_parameters() yields"))
        names = [n for n, _ in named]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(error(self._what, f"parameter names are not unique: {dup}"))
        mapping = {p: n for n, p in named}
        missing = [i for i, p in enumerate(all_params) if p not in mapping]
        if missing:
            raise ValueError(error(self._what, "named_parameters does not name every parameter of "
                                   f"the optimizer ({len(missing)} unnamed)"))
        return mapping

    def _register_hooks(self):
        for i, p in enumerate(self._params):
            acc = p.expand_as(p).grad_fn.next_functions[0][0]
            acc.register_hook(self._make_hook(i, p))
            self._grad_accs.append(acc)  # keep the accumulator (and its hook) alive

    def _make_hook(self, i, p):
        def hook(*_):
            self._drop_stale_round()
            arrival = self._reducer.arrived(i)
            if arrival == _EXTRA:
                raise AssertionError(error(self._what, f"the gradient of '{self._names.get(p)}' was "
                                           "computed more than backward_passes_per_step times "
                                           "before step() or synchronize(); raise "
                                           "backward_passes_per_step or call step()"))
            if arrival == _FINAL:
                self._hand_over(i, p)
        return hook

    def _hand_over(self, i, p):
        """p's gradient (None: zeros) to the reducer, which copies it into its bucket
        or, a bucket of p alone, reduces it where it lies."""
        g = p.grad
        if g is None:
            self._reducer.ready(i, 0)
            return
        own = not g.is_sparse and g.is_contiguous() and g.dtype == p.dtype and g.device == p.device
        if not own:
            # A sparse gradient is reduced densely whether or not sparse_as_dense
            # is set: the same sums as Horovod's allgather of indices and values,
            # the same on every rank whatever its gradient's sparsity; written
            # back sparse.
            g = (g.to_dense() if g.is_sparse else g).to(device=p.device, dtype=p.dtype).contiguous()
        self._held[i] = g
        s = self._stream_of[i]
        if s is not None:
            # Backward may have run on another stream (the autograd engine's
            # current one here): the reducer's reads of g on s wait for its writes.
            current = torch.cuda.current_stream(s.device)
            if current != s:
                s.wait_stream(current)
        self._reducer.ready(i, g.data_ptr(), own)

    # ---- one round -----------------------------------------------------------------
    def _drop_stale_round(self):
        """A step that failed half-way (a lost peer: KoloError in backward or
        step) leaves works and counts of a communicator that is gone; once
        init() has formed a new one (elastic re-formation), the next step
        starts afresh on it instead of tripping over them."""
        serial = basics.communicator_serial()
        if serial == self._serial:
            return
        self._serial = serial
        self._synchronized = False
        self._held.clear()
        self._reducer.reset(self._comm())

    def synchronize(self):
        """Finishes this step's allreduces and writes the results to p.grad."""
        if not self._included:
            self._synchronized = True
            return
        self._drop_stale_round()
        r = self._reducer
        r.begin_finish()
        for i in r.unready():  # a gradient that never arrived counts as zeros
            self._hand_over(i, self._params[i])
        try:
            r.finish()
        finally:
            self._held.clear()
        steps_taken.add(self._comm())
        with torch.no_grad():
            outs, sparse = [], []
            for p in self._params:
                g = p.grad
                if g is None:
                    p.grad = g = torch.zeros_like(p, memory_format=torch.contiguous_format)
                elif g.is_sparse or not g.is_contiguous() or g.dtype != p.dtype:
                    # As Horovod: a sparse gradient stays sparse.
                    sparse.append((p, torch.empty_like(p, memory_format=torch.contiguous_format)))
                    outs.append(sparse[-1][1].data_ptr())
                    continue
                outs.append(g.data_ptr())
            self._order_streams(before=True)
            r.results(outs)
            self._order_streams(before=False)
            for p, dense in sparse:
                p.grad = dense.to_sparse() if p.grad.is_sparse else p.grad.copy_(dense)
        self._synchronized = True

    def _order_streams(self, before):
        """The reducer writes the results on the streams it was made with;
        where training now runs on another stream (torch.cuda.stream(...)),
        the writes wait for it (before: the gradients zeroed or allocated
        there) and it waits for them (after: step() reads them there)."""
        for s in self._streams:
            current = torch.cuda.current_stream(s.device)
            if current == s:
                continue
            if before:
                s.wait_stream(current)
            else:
                current.wait_stream(s)

    def mirror_step(self):
        """A joined rank's part in a step of the others: zeros for every bucket."""
        self._reducer.shadow()

    @contextlib.contextmanager
    def skip_synchronize(self):
        """step() inside this block does not synchronize (call synchronize() first)."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized:
                import warnings
                # Horovod's text, word for word (programs and tests match on it).
                warnings.warn("optimizer.step() called without "
                              "optimizer.skip_synchronize() context after "
                              "optimizer.synchronize(). This can cause training "
                              "slowdown. You may want to consider using "
                              "optimizer.skip_synchronize() context if you use "
                              "optimizer.synchronize() in your code.")
            self.synchronize()
        self._synchronized = False
        if not _C.timeline_on():
            return super(self.__class__, self).step(closure)
        t0 = _C.timeline_now_ns()
        result = super(self.__class__, self).step(closure)
        _C.timeline_span("torch", "optimizer step", t0, _C.timeline_now_ns())
        return result

    def zero_grad(self, *args, **kwargs):
        self._drop_stale_round()
        if self._reducer is not None and self._reducer.started():
            raise AssertionError(error(self._what, "optimizer.zero_grad() was called after "
                                       "loss.backward() but before optimizer.step() or "
                                       "optimizer.synchronize()"))
        return super(self.__class__, self).zero_grad(*args, **kwargs)


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False, process_set=None):
    """Wraps optimizer (any torch.optim.Optimizer): step() averages gradients over ranks first.

    The result is an instance of a subclass of the optimizer's own class, as
    in Horovod; its param_groups (and hyper-parameters) are the original's."""
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
               dict(_DistributedOptimizer.__dict__))
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step, op,
               gradient_predivide_factor, groups, sparse_as_dense, process_set)


@with_process_set
def join(device=-1, process_set=None):
    """Takes part, with zeros, in the other ranks' DistributedOptimizer steps
    until every rank has joined; returns the (global) rank that joined last.

    Named allreduces of the other ranks run with zeros from this rank, as in
    Horovod, and their other named operations fail on the ranks that issued
    them (the engine's named channel, Communicator::set_joined). Of unnamed
    calls only DistributedOptimizer steps can be mirrored (they are matched by
    call order, so a joined rank cannot know the shape of another call): an
    active rank that issues another unnamed collective while a rank waits
    here gets kolo's mismatch error; the waiting rank, which rejected that
    call too, goes on waiting (the communicator remains usable,
    comm/context.h).
    process_set (a kolo extension: Horovod's join has none) joins the ranks
    of that set, whose optimizer is then the one mirrored."""
    c = comm()
    opt = latest_optimizer()
    if opt is not None and (not opt._included or opt._comm() is not c):
        # Not an error here: a finished optimizer may still be alive on this
        # rank only (not yet collected), and an error on one rank would leave
        # the others waiting. Should the other ranks step on this set, the
        # flag rounds say that this rank has nothing to mirror.
        opt = None
    flag = torch.zeros(1, dtype=torch.int32, device="cpu")
    c.set_joined(True)  # meanwhile, the other ranks' named allreduces run with zeros from this rank
    try:
        waited = _wait_for_all_joined(c, flag, opt)
    finally:
        c.set_joined(False)
    # The last to join stepped the most (since the previous join), else issued
    # the most named operations, and then waited the fewest rounds.
    issued = named_issued.pop(c, 0)
    mine = torch.tensor([steps_taken.pop(c, 0), issued, -waited], dtype=torch.int64, device="cpu")
    every = torch.empty(c.size(), 3, dtype=torch.int64, device="cpu")
    c.allgather(mine.data_ptr(), every.data_ptr(), 3, _C.I64)
    keys = [tuple(row) for row in every.tolist()]
    last = max(keys)
    return c.world_ranks()[max(r for r, k in enumerate(keys) if k == last)]


def _wait_for_all_joined(c, flag, opt):
    """join()'s flag rounds until every rank has joined; returns how many it took."""
    waited = 0  # flag rounds this rank spent here, rejected ones included
    while True:
        flag.zero_()
        waited += 1
        try:
            c.allreduce(flag.data_ptr(), flag.data_ptr(), 1, _C.I32, _C.SUM)
        except _C.Error as e:
            if basics.REJECTED not in str(e):
                raise
            continue
        if int(flag[0]) == 0:
            break
        if opt is None:
            raise RuntimeError(error("join", "other ranks are stepping a DistributedOptimizer, "
                                     "but this rank has none on this process set to mirror"))
        opt.mirror_step()
    return waited
