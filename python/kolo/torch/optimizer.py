"""DistributedOptimizer: Horovod's wrapper that averages gradients over ranks.

How a step runs (the same on every rank, so kolo's call-order matching holds):
  * At construction the parameters are laid out in buckets, in reverse order
    of the optimizer's parameter list (roughly the order backward finishes
    them), closed at a dtype change or once they hold the size cap (1 MiB
    for the first bucket so that communication starts early, 25 MiB after).
  * A hook on each parameter's gradient accumulator counts backward passes;
    after backward_passes_per_step of them the gradient is ready. Buckets are
    issued strictly in bucket order as soon as all their gradients are ready:
    the gradients are copied (cast, with compression) into the bucket's flat
    buffer and an asynchronous kolo allreduce starts while backward goes on.
    A bucket of one gradient (every parameter above the cap) is reduced where
    it lies, in p.grad, as Horovod does: no copy in or out.
  * Just before the first bucket of a step, a one-element allreduce of an
    "active" flag (1 on every rank that steps) is issued. A rank that has
    called join() answers it with 0 and mirrors the step's buckets with
    zeros, so ranks with more batches can go on; the flag's sum — the number
    of ranks that really stepped — is the divisor of op=Average.
  * synchronize() (called by step()) issues what is left (gradients that
    never arrived count as zeros, as in Horovod), waits, and writes the
    averaged gradients back to p.grad.
  * op=Average without a predivide factor is kolo's Average (the division
    happens in the reduction: no pass of its own); only when ranks have
    joined are the results scaled by size / active afterwards.
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
from kolo.torch.collectives import named_issued
from kolo.torch.compression import Compression
from kolo.torch.dtypes import Average

FIRST_BUCKET_BYTES = 1 << 20
BUCKET_BYTES = 25 << 20

_latest = None  # weakref to the newest DistributedOptimizer (join() mirrors its buckets)


def latest_optimizer():
    return _latest() if _latest is not None else None


class _Bucket:
    def __init__(self, params, wire_dtype):
        self.params = params
        n = sum(p.numel() for p in params)
        # On the parameters' device: a CUDA model's buckets are reduced in CUDA
        # memory, ordered on the stream backward computed the gradients on.
        self.buffer = torch.zeros(n, dtype=wire_dtype, device=params[0].device)
        self.views, off = [], 0
        for p in params:
            self.views.append(self.buffer[off:off + p.numel()])
            off += p.numel()
        self.code = dtypes._NATIVE.get(wire_dtype)
        self.work = None
        self.target = None  # what this step's allreduce reduces: buffer, or p.grad itself
        self.t_issue = 0  # timeline: when its allreduce was issued (ns)


def _wire_dtype(compression, p):
    sent, _ = compression.compress(torch.zeros(1, dtype=p.dtype))
    return sent.dtype


def make_buckets(params, compression):
    buckets, current, size, dtype, device = [], [], 0, None, None
    cap = FIRST_BUCKET_BYTES
    for p in reversed(params):
        wire = _wire_dtype(compression, p)
        if current and (wire != dtype or p.device != device):
            buckets.append(_Bucket(current, dtype))
            current, size = [], 0
        current.append(p)
        size += p.numel() * torch.empty(0, dtype=wire).element_size()
        dtype, device = wire, p.device
        if size >= cap:  # as DDP: a bucket closes once it holds at least the cap
            buckets.append(_Bucket(current, dtype))
            current, size, cap = [], 0, BUCKET_BYTES
    if current:
        buckets.append(_Bucket(current, dtype))
    return buckets


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
        self._average = code == _C.AVERAGE
        self._predivide = float(gradient_predivide_factor)
        # The op on the wire, the same on every rank (join() mirrors it).
        self._wire_op = _C.AVERAGE if self._average and self._predivide == 1.0 else _C.SUM
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
        self._buckets = make_buckets(self._params, self._compression)
        self._bucket_of = {p: b for b in self._buckets for p in b.params}
        self._flag = torch.zeros(1, dtype=torch.int32, device="cpu")
        self._flag_work = None
        self._rounds = 0  # steps this rank took part in as an active rank since the last join()
        self._should_synchronize = True
        self._synchronized = False
        self._reset_round()
        self._serial = basics.communicator_serial()
        self._grad_accs = []
        if self._included:
            self._register_hooks()
        global _latest
        _latest = weakref.ref(self)

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
        for p in self._params:
            acc = p.expand_as(p).grad_fn.next_functions[0][0]
            acc.register_hook(self._make_hook(p))
            self._grad_accs.append(acc)  # keep the accumulator (and its hook) alive

    def _make_hook(self, p):
        def hook(*_):
            self._drop_stale_round()
            if p in self._ready:
                raise AssertionError(error(self._what, f"the gradient of '{self._names.get(p)}' was "
                                           "computed more than backward_passes_per_step times "
                                           "before step() or synchronize(); raise "
                                           "backward_passes_per_step or call step()"))
            if self._t_first is None:  # the timeline's "backward" starts at the first gradient
                self._t_first = _C.timeline_now_ns() if _C.timeline_on() else 0
            self._passes[p] = self._passes.get(p, 0) + 1
            if self._passes[p] == self.backward_passes_per_step:
                self._ready.add(p)
                self._issue_ready()
        return hook

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
        self._flag_work = None
        for b in self._buckets:
            b.work = b.target = None
        self._synchronized = False
        self._reset_round()

    def _reset_round(self):
        self._passes = {}
        self._ready = set()
        self._next = 0  # index of the next bucket to issue
        self._t_first = None  # timeline: first gradient of the round (0: timeline off)

    def _start_round(self, active):
        self._flag[0] = 1 if active else 0
        ptr = self._flag.data_ptr()
        self._flag_work = self._comm().allreduce_async(ptr, ptr, 1, _C.I32, _C.SUM)

    def _issue_ready(self):
        while self._next < len(self._buckets) and all(
                p in self._ready for p in self._buckets[self._next].params):
            self._issue(self._buckets[self._next])
            self._next += 1

    def _in_place(self, b):
        """p.grad itself when the bucket is that one gradient and kolo can reduce it where it lies."""
        if len(b.params) != 1 or self._predivide != 1.0:
            return None
        g = b.params[0].grad
        if (g is None or g.is_sparse or g.device != b.buffer.device or g.dtype != b.buffer.dtype
                or not g.is_contiguous()):
            return None
        return g

    def _issue(self, b):
        if self._flag_work is None:
            self._start_round(True)
        b.target = self._in_place(b)
        if b.target is None:
            self._fill(b)
            b.target = b.buffer
        ptr = b.target.data_ptr()
        if self._t_first:
            _C.timeline_name_next(f"bucket {self._next}")  # _issue_ready's index of b
            b.t_issue = _C.timeline_now_ns()
        b.work = self._comm().allreduce_async(ptr, ptr, b.buffer.numel(), b.code, self._wire_op,
                                              **dtypes.place(b.target))

    def _fill(self, b):
        """Copies the bucket's gradients (zeros for those that never arrived) into its buffer."""
        with torch.no_grad():
            for p, view in zip(b.params, b.views):
                g = p.grad
                if g is None:
                    view.zero_()
                    continue
                if g.is_sparse:
                    # Reduced densely whether or not sparse_as_dense is set: the
                    # same sums as Horovod's allgather of indices and values
                    # (sparse_allreduce_async), and the same on every rank
                    # whatever its gradient's sparsity; written back sparse.
                    g = g.to_dense()
                view.copy_(g.reshape(-1))
            if self._predivide != 1.0:
                b.buffer.div_(self._predivide)

    def synchronize(self):
        """Finishes this step's allreduces and writes the results to p.grad."""
        if not self._included:
            self._synchronized = True
            return
        self._drop_stale_round()
        for p in self._params:
            self._ready.add(p)  # a gradient that never arrived counts as zeros
        self._issue_ready()
        if self._flag_work is None:  # no buckets at all: the flag still keeps join() in step
            self._start_round(True)
        targets = [b.target for b in self._buckets]
        t_first = self._t_first
        t_sync = _C.timeline_now_ns() if t_first else 0
        try:
            self._flag_work.wait()
            active = int(self._flag[0])
            for i, b in enumerate(self._buckets):
                b.work.wait()
                if t_first:  # issue to done, as this thread saw it
                    _C.timeline_span("torch", f"bucket {i}", b.t_issue, _C.timeline_now_ns(),
                                     f'"bytes": {b.buffer.numel() * b.buffer.element_size()}, '
                                     f'"params": {len(b.params)}')
            if t_first:
                _C.timeline_span("torch", "backward", t_first, t_sync,
                                 '"from": "the first gradient ready"')
                _C.timeline_span("torch", "synchronize", t_sync, _C.timeline_now_ns())
        finally:
            self._flag_work = None
            for b in self._buckets:
                b.work = b.target = None
            self._reset_round()
        self._rounds += 1
        # kolo returned the sum over all ranks of grad / predivide, or with
        # Average on the wire that sum / size; joined ranks added zeros.
        if not self._average:
            scale = 1.0
        elif self._wire_op == _C.AVERAGE:
            scale = self._comm().size() / active
        else:
            scale = self._predivide / active
        with torch.no_grad():
            for b, target in zip(self._buckets, targets):
                if scale != 1.0:
                    target.mul_(scale)
                if target is not b.buffer:
                    continue  # reduced in place: p.grad holds the result
                for p, view in zip(b.params, b.views):
                    if p.grad is None:
                        p.grad = torch.zeros_like(p)
                    elif p.grad.is_sparse:  # as Horovod: a sparse gradient stays sparse
                        p.grad = view.view_as(p).to_sparse()
                        continue
                    p.grad.copy_(view.view_as(p.grad))
        self._synchronized = True

    def mirror_step(self):
        """A joined rank's part in a step of the others: zeros for every bucket."""
        with torch.no_grad():
            for b in self._buckets:
                b.buffer.zero_()
                ptr = b.buffer.data_ptr()
                self._comm().allreduce(ptr, ptr, b.buffer.numel(), b.code, self._wire_op,
                                       **dtypes.place(b.buffer))

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
        if self._flag_work is not None:
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
    engine/context.h).
    process_set (a kolo extension: Horovod's join has none) joins the ranks
    of that set, whose optimizer is then the one mirrored."""
    c = comm()
    opt = latest_optimizer()
    if opt is not None and (not opt._included or opt._comm() is not c):
        raise RuntimeError(error("join", "the latest DistributedOptimizer runs on another process set "
                                 "than this join()"))
    flag = torch.zeros(1, dtype=torch.int32, device="cpu")
    c.set_joined(True)  # meanwhile, the other ranks' named allreduces run with zeros from this rank
    try:
        waited = _wait_for_all_joined(c, flag, opt)
    finally:
        c.set_joined(False)
    # The last to join stepped the most (since the previous join), else issued
    # the most named operations, and then waited the fewest rounds.
    issued = named_issued.pop(id(c), 0)
    mine = torch.tensor([opt._rounds if opt is not None else 0, issued, -waited], dtype=torch.int64,
                        device="cpu")
    if opt is not None:
        opt._rounds = 0
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
                                     "but this rank has none to mirror"))
        opt.mirror_step()
    return waited
