"""The torch.distributed backend "kolo": kolo's engine under ``init_process_group("kolo")``.

``import kolo.torch`` registers it; after that an unchanged DDP program runs on
kolo with ``dist.init_process_group("kolo")`` — through ``env://`` with
MASTER_ADDR/MASTER_PORT (torchrun, or kolorun, which sets them), or with no
MASTER_* variables at all under mpirun or srun (kolo's own discovery; see
process_group_rendezvous.py). The group shares its communicator with
``kolo.torch``'s Horovod API, so both may be used in one program (their
collectives then share one order, as every collective on a communicator does).

Pure Python on torch's public API and kolo's binding: no LibTorch is linked,
so one build serves torch 1.13 to 2.15 (both tested). Every op issues kolo's
asynchronous collective and returns a KoloWork (process_group_work.py); DDP's
Reducer reads the results through the work's future, so backward overlaps
communication.

CUDA tensors (where kolo was built with CUDA; docs/gpus.md): an op on CUDA
tensors is ordered on torch's current stream as NCCL's are — it reads its
inputs after the work queued there before the call, and the copies out of
staging buffers are queued on that stream after it. The work's future is a
CUDA future (DDP's Reducer and then()-callbacks wait for it on the GPU);
``work.wait()`` waits from the host, then makes the current stream wait for
the op's stream. Every tensor of one op is on one device.

How each op maps onto kolo's collectives (CPU or CUDA tensors, contiguous; kolo's 7
dtypes natively, int8/int16/bool as kolo.torch.dtypes maps them, any other
dtype is an error naming it). torch 2.15 renamed the single-tensor ops
(``all_gather_single`` ...); the older names (``_allgather_base`` ...), which
torch 1.13 to 2.14 call, are the same methods:

  allreduce            allreduce: SUM, AVG, MIN, MAX, PRODUCT,
                       PREMUL_SUM (floating types; torch >= 2.x's ReduceOp.PREMUL_SUM(f),
                       which FSDP2's set_gradient_divide_factor issues: each rank's
                       tensor times f, then SUM — as NCCL, which gloo refuses);
                       BAND/BOR/BXOR are an error naming the op. AVG of integer
                       tensors is the SUM divided by the group size, rounded toward
                       zero, as NCCL's (Lightning's sync_dist averages
                       its int64 batch counts so); bool has no AVG
  allreduce_coalesced  one allreduce of the concatenated tensors (one dtype)
  broadcast            broadcast
  allgather            allgather, or allgatherv when the output tensors differ in size
  all_gather_single    allgather into the output tensor (all_gather_into_tensor);
    (_allgather_base)
  all_gather_single_coalesced      one allgather of the concatenated inputs
    (allgather_into_tensor_coalesced)
  allgather_coalesced  one allgather of the concatenated tensors
  reduce_scatter, reduce_scatter_single (_reduce_scatter_base)   reduce_scatter
  reduce_scatter_single_coalesced  one reduce_scatter of the inputs' blocks
    (reduce_scatter_tensor_coalesced)  interleaved by rank
  all_to_all_single    alltoall; with split sizes, alltoallv (which checks the
    (alltoall_base)    ranks' sizes against each other inside the collective)
  alltoall             alltoallv of the concatenated inputs (alltoallv: CUDA tensors
                       through host copies; kolo's alltoallv takes host memory only)
  barrier              barrier
  reduce               allreduce (non-root ranks into scratch: their tensor is unchanged)
  gather, gather_single (gather_into_tensor)   allgather (non-root ranks discard it)
  scatter              broadcast of the root's concatenated inputs
  send, recv           an error: kolo has collectives only (batch_isend_irecv too)

Object collectives (broadcast_object_list, all_gather_object, gather_object,
scatter_object_list) are torch's Python over these ops. On torch 2.x the
group is registered for the CPU and CUDA devices (``devices=["cpu", "cuda"]``)
and answers ``_get_backend(cpu or cuda)`` itself, so ``init_process_group("kolo",
device_id=torch.device("cuda:0"))`` works; it does not offer communicator
splitting to torch. In a per-device string (``"cpu:gloo,cuda:kolo"``) torch
takes the group kolo's creator returns for the whole group (a ProcessGroup,
not a per-device Backend): the CPU tensors then go through kolo as well.

Subgroups: ``new_group(ranks)`` (and torch's ``new_subgroups``, ``split_group``
over it) makes a kolo group of those ranks (``Communicator.group``), formed by
the members alone as torch runs the creator on members only; shared memory
where they share a host, TCP or the hierarchy otherwise.

Limits: one tensor per call (the per-GPU tensor lists of other backends are an
error); timeouts are kolo's (KOLO_TIMEOUT_MS), not ``timeout=``.
"""
import inspect
import math

import torch
import torch.distributed as dist

from kolo import _C
from kolo.basics import error
from kolo.splits import split_rows
from kolo.torch import dtypes
from kolo.torch.dtypes import place, through_host
from kolo.torch.process_group_rendezvous import communicator_for, install_env_handler
from kolo.torch.process_group_work import Completer

# The devices whose tensors the group takes: CUDA ones where kolo was built
# with CUDA (a CUDA tensor on a build without is refused by name, dtypes.check_tensor).
_DEVICES = ("cpu", "cuda")
_OPS = {"SUM": _C.SUM, "AVG": _C.AVERAGE, "MIN": _C.MIN, "MAX": _C.MAX, "PRODUCT": _C.PRODUCT}


def _op_name(opts):
    op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
    return op, getattr(getattr(op, "op", op), "name", str(op))


def _op_code(what, opts):
    op, name = _op_name(opts)
    if name == "PREMUL_SUM":
        return _C.SUM  # its factor is applied by _premultiplied before the SUM
    code = _OPS.get(name)
    if code is None:
        raise ValueError(error(what, f"ReduceOp.{name} is not supported by the kolo backend "
                               "(supported: SUM, AVG, MIN, MAX, PRODUCT, PREMUL_SUM)"))
    return code


def _premultiplied(what, t, opts, fresh):
    """t as the SUM of a PREMUL_SUM(f) reads it: times f, in place where t
    may be overwritten (fresh: the op's own buffer, or the tensor the result
    goes into), else a copy, since the op leaves its input unchanged. t itself
    for every other op. FSDP2 issues PREMUL_SUM(1/f) for a gradient divide
    factor f other than the world size (set_gradient_divide_factor)."""
    op, name = _op_name(opts)
    if name != "PREMUL_SUM":
        return t
    factor = getattr(op, "factor", None)  # a float or a one-element tensor
    if factor is None:
        raise ValueError(error(what, f"ReduceOp.PREMUL_SUM carries no readable factor in torch "
                               f"{torch.__version__} (ReduceOp.factor); use SUM and scale"))
    if not t.is_floating_point():
        raise TypeError(error(what, f"ReduceOp.PREMUL_SUM is defined for floating tensors only, not {t.dtype}"))
    if isinstance(factor, torch.Tensor):
        factor = factor.item()
    return t.mul_(factor) if fresh else t.mul(factor)


def _int_average(what, t, opts):
    """Whether this is AVG of an integer tensor: reduced as SUM, then divided
    (ProcessGroupKolo._dividing)."""
    if t.is_floating_point() or _op_name(opts)[1] != "AVG":
        return False
    if t.dtype == torch.bool:
        raise TypeError(error(what, "ReduceOp.AVG is not defined for torch.bool"))
    return True


def _one(what, items, kind="tensor"):
    if len(items) != 1:
        raise ValueError(error(what, f"the kolo backend takes one {kind} per call, got {len(items)} "
                               "(several are for backends with one per GPU)"))
    return items[0]


def _check(what, tensors, like=None, name="tensor"):
    """Every tensor is one kolo can read in place (CPU, or CUDA where kolo was
    built with it), with like's dtype and on like's device."""
    for t in tensors:
        dtypes.check_tensor(what, t, name)
        if like is not None and t.dtype != like.dtype:
            raise TypeError(error(what, f"{name} has dtype {t.dtype} but the input has {like.dtype}"))
        if like is not None and t.device != like.device:
            raise ValueError(error(what, f"{name} is on {t.device} but the input is on {like.device} "
                                   "(one collective moves memory of one device)"))


def _stream_of(*groups):
    """The CUDA stream the op was issued on (torch's current stream of the
    first tensor's device), or None for an op on CPU tensors or none at all."""
    for group in groups:
        for t in group:
            if isinstance(t, (list, tuple)):
                found = _stream_of(t)
                if found is not None:
                    return found
            elif isinstance(t, torch.Tensor):
                return torch.cuda.current_stream(t.device) if t.is_cuda else None
    return None


def _unit(t):
    """(kolo dtype code, kolo elements per element of t) for moving t's bytes."""
    code, _ = dtypes.move_code(t)
    return code, (t.element_size() if code == _C.U8 else 1)


def _reduction_buffer(what, t, op):
    """(buffer, dtype code, op code, copy_back): t itself, t's bytes as u8
    (bool), or a widened copy (int8, int16) that copy_back must narrow into t."""
    wide, code, op = dtypes.reduce_plan(what, t, op)
    if wide is None:
        return t, code, op, False
    if t.dtype == torch.bool:
        return t.view(torch.uint8), code, op, False
    return t.to(wide), code, op, True


class ProcessGroupKolo(dist.ProcessGroup):
    """A torch ProcessGroup whose every op is a kolo collective (see the module text)."""

    def __init__(self, comm, rank, size):
        super().__init__(rank, size)
        self._comm = comm
        self._completer = Completer()
        self._name = None  # where no backend entry holds it (see _create)

    def getBackendName(self):
        return "kolo"

    # torch 2.x names a group through its per-device backends (see _create). Where
    # torch's Backend cannot be made from Python (torch 2.11 has no constructor for
    # it; 2.15 has one) the group has none, and the name torch gives it is kept here.
    def _set_group_name(self, name):
        self._name = name
        super()._set_group_name(name)

    @property
    def group_name(self):
        return super().group_name if self._name is None else self._name

    def _submit(self, what, kolo_work, value, finish=None, keep=()):
        return self._completer.submit(what, kolo_work, value, finish, keep, _stream_of(keep, value))

    def _reduce_op(self, what, t, opts):
        """(kolo op code, integer AVG) for reducing t: integer AVG reduces as SUM."""
        avg = _int_average(what, t, opts)
        return (_C.SUM if avg else _op_code(what, opts)), avg

    def _dividing(self, finish, result):
        """finish, preceded by the integer AVG's division of the summed result
        (in the widened buffer, before it is narrowed into the caller's tensor)."""
        n = self.size()

        def run():
            result.div_(n, rounding_mode="trunc")
            if finish is not None:
                finish()
        return run

    def _check_pairs(self, what, outputs, inputs, wide, narrow):
        """The coalesced single-tensor ops: as many outputs as inputs, one
        dtype, and each tensor of `wide` holding ranks x its partner in
        `narrow`. False when there is nothing to do."""
        if len(outputs) != len(inputs):
            raise ValueError(error(what, f"{len(outputs)} outputs for {len(inputs)} inputs"))
        if not inputs:
            return False
        _check(what, inputs, like=inputs[0], name="input tensor")
        _check(what, outputs, like=inputs[0], name="output tensor")
        for w, n in zip(wide, narrow):
            if w.numel() != self.size() * n.numel():
                raise ValueError(error(what, f"a tensor of {w.numel()} elements must hold {self.size()} x "
                                       f"{n.numel()} (ranks x its partner's elements)"))
        return True

    def _root(self, what, root):
        if not 0 <= root < self.size():
            raise ValueError(error(what, f"root rank {root} is not in 0..{self.size() - 1}"))
        return root

    # -- reductions ---------------------------------------------------------

    def allreduce(self, tensors, opts=None):
        what = "allreduce"
        t = _one(what, tensors)
        _check(what, [t])
        t = _premultiplied(what, t, opts, fresh=True)
        kop, avg = self._reduce_op(what, t, opts)
        buf, code, op, back = _reduction_buffer(what, t, kop)
        work = self._comm.allreduce_async(buf.data_ptr(), buf.data_ptr(), buf.numel(), code, op, **place(buf))
        finish = (lambda: t.copy_(buf)) if back else None
        return self._submit(what, work, tensors, self._dividing(finish, buf) if avg else finish, (buf,))

    def allreduce_coalesced(self, tensors, opts=None):
        what = "allreduce_coalesced"
        if not tensors:
            return self._submit(what, None, tensors)
        _check(what, tensors, like=tensors[0])
        flat = _premultiplied(what, torch.cat([t.reshape(-1) for t in tensors]), opts, fresh=True)
        kop, avg = self._reduce_op(what, flat, opts)
        buf, code, op, back = _reduction_buffer(what, flat, kop)
        work = self._comm.allreduce_async(buf.data_ptr(), buf.data_ptr(), buf.numel(), code, op, **place(buf))

        def finish():
            result = buf.to(flat.dtype) if back else flat
            for t, part in zip(tensors, result.split([t.numel() for t in tensors])):
                t.copy_(part.view(t.shape))
        return self._submit(what, work, tensors, self._dividing(finish, buf) if avg else finish, (buf, flat))

    def reduce(self, tensors, opts=None):
        what = "reduce"
        t = _one(what, tensors)
        _check(what, [t])
        root = self._root(what, opts.rootRank if opts is not None else 0)
        mine = self.rank() == root
        scaled = _premultiplied(what, t, opts, fresh=mine)
        kop, avg = self._reduce_op(what, scaled, opts)
        buf, code, op, back = _reduction_buffer(what, scaled, kop)
        out = buf if mine else torch.empty_like(buf)
        work = self._comm.allreduce_async(buf.data_ptr(), out.data_ptr(), buf.numel(), code, op, **place(buf))
        finish = (lambda: t.copy_(buf)) if back and mine else None
        if avg and mine:
            finish = self._dividing(finish, buf)
        return self._submit(what, work, tensors, finish, (buf, out))

    def _reduce_scatter_into(self, what, flat, output, opts, fresh):
        flat = _premultiplied(what, flat, opts, fresh)
        kop, avg = self._reduce_op(what, flat, opts)
        buf, code, op, back = _reduction_buffer(what, flat, kop)
        if back:
            out = buf.new_empty(output.numel())
        else:
            out = output.view(torch.uint8) if output.dtype == torch.bool else output
        work = self._comm.reduce_scatter_async(buf.data_ptr(), out.data_ptr(), output.numel(), code, op,
                                               **place(buf))
        finish = (lambda: output.copy_(out.view(output.shape))) if back else None
        return self._submit(what, work, [output], self._dividing(finish, out) if avg else finish, (buf, out))

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        what = "reduce_scatter"
        out = _one(what, output_tensors)
        ins = _one(what, input_tensors, "input list")
        _check(what, [out])
        _check(what, ins, like=out, name="input tensor")
        if len(ins) != self.size() or any(i.numel() != out.numel() for i in ins):
            raise ValueError(error(what, f"needs {self.size()} input tensors of {out.numel()} elements "
                                   f"(the output's), got sizes {[i.numel() for i in ins]}"))
        return self._reduce_scatter_into(what, torch.cat([i.reshape(-1) for i in ins]), out, opts, fresh=True)

    def reduce_scatter_single(self, output, input, opts=None):
        what = "reduce_scatter_tensor"
        _check(what, [input])
        _check(what, [output], like=input, name="output")
        if input.numel() != self.size() * output.numel():
            raise ValueError(error(what, f"the input holds {input.numel()} elements; it must hold "
                                   f"{self.size()} x {output.numel()} (ranks x output elements)"))
        return self._reduce_scatter_into(what, input, output, opts, fresh=False)

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        """One reduce-scatter for several (output, input) pairs: rank r's block
        of the concatenation holds block r of every input, in order."""
        what = "reduce_scatter_tensor_coalesced"
        if not self._check_pairs(what, outputs, inputs, wide=inputs, narrow=outputs):
            return self._submit(what, None, outputs)
        flat = torch.cat([i.reshape(self.size(), -1) for i in inputs], dim=1).reshape(-1)
        flat = _premultiplied(what, flat, opts, fresh=True)
        counts = [o.numel() for o in outputs]
        kop, avg = self._reduce_op(what, flat, opts)
        buf, code, op, _ = _reduction_buffer(what, flat, kop)
        out = buf.new_empty(sum(counts))
        work = self._comm.reduce_scatter_async(buf.data_ptr(), out.data_ptr(), out.numel(), code, op, **place(buf))

        def finish():
            for o, part in zip(outputs, out.split(counts)):
                o.copy_(part.view(o.shape))
        return self._submit(what, work, outputs, self._dividing(finish, out) if avg else finish, (buf, out))

    # -- data movement ------------------------------------------------------

    def broadcast(self, tensors, opts=None):
        what = "broadcast"
        t = _one(what, tensors)
        _check(what, [t])
        root = self._root(what, opts.rootRank if opts is not None else 0)
        code, count = dtypes.move_code(t)
        work = self._comm.broadcast_async(t.data_ptr(), count, code, root, **place(t))
        return self._submit(what, work, tensors)

    def _gather_into(self, what, t, counts, staging):
        """Issues the allgather(v) of t into staging; counts are elements per rank."""
        code, per = _unit(t)
        if len(set(counts)) == 1:
            return self._comm.allgather_async(t.data_ptr(), staging.data_ptr(), t.numel() * per, code, **place(t))
        return self._comm.allgatherv_async(t.data_ptr(), staging.data_ptr(), [c * per for c in counts], code,
                                           **place(t))

    def _outputs(self, what, outs, t):
        _check(what, outs, like=t, name="output tensor")
        if len(outs) != self.size():
            raise ValueError(error(what, f"needs {self.size()} output tensors (one per rank), got {len(outs)}"))
        if outs[self.rank()].numel() != t.numel():
            raise ValueError(error(what, f"the output tensor for this rank holds {outs[self.rank()].numel()} "
                                   f"elements but the input holds {t.numel()}"))

    def allgather(self, output_tensors, input_tensors, opts=None):
        what = "allgather"
        t = _one(what, input_tensors)
        outs = _one(what, output_tensors, "output list")
        _check(what, [t])
        self._outputs(what, outs, t)
        counts = [o.numel() for o in outs]
        staging = t.new_empty(sum(counts))
        work = self._gather_into(what, t, counts, staging)

        def finish():
            for o, part in zip(outs, staging.split(counts)):
                o.copy_(part.view(o.shape))
        return self._submit(what, work, output_tensors, finish, (t, staging))

    def all_gather_single(self, output, input, opts=None):
        what = "all_gather_into_tensor"
        _check(what, [input])
        _check(what, [output], like=input, name="output")
        if output.numel() != self.size() * input.numel():
            raise ValueError(error(what, f"the output holds {output.numel()} elements; it must hold "
                                   f"{self.size()} x {input.numel()} (ranks x input elements)"))
        code, per = _unit(input)
        work = self._comm.allgather_async(input.data_ptr(), output.data_ptr(), input.numel() * per, code,
                                          **place(input))
        return self._submit(what, work, [output], keep=(input,))

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        """One allgather of the concatenated inputs; output k gets input k of every rank."""
        what = "all_gather_into_tensor_coalesced"
        if not self._check_pairs(what, outputs, inputs, wide=outputs, narrow=inputs):
            return self._submit(what, None, outputs)
        flat = torch.cat([i.reshape(-1) for i in inputs])
        staging = flat.new_empty((self.size(), flat.numel()))
        work = self._gather_into(what, flat, [flat.numel()] * self.size(), staging)

        def finish():
            for o, block in zip(outputs, staging.split([i.numel() for i in inputs], dim=1)):
                o.copy_(block.reshape(o.shape))
        return self._submit(what, work, outputs, finish, (flat, staging))

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        what = "allgather_coalesced"
        if not input_list:
            return self._submit(what, None, output_lists)
        _check(what, input_list, like=input_list[0], name="input tensor")
        sizes = [t.numel() for t in input_list]
        if len(output_lists) != self.size() or any(
                [o.numel() for o in outs] != sizes for outs in output_lists):
            raise ValueError(error(what, f"needs {self.size()} output lists shaped like the input list"))
        for outs in output_lists:
            _check(what, outs, like=input_list[0], name="output tensor")
        flat = torch.cat([t.reshape(-1) for t in input_list])
        staging = flat.new_empty(self.size() * flat.numel())
        work = self._gather_into(what, flat, [flat.numel()] * self.size(), staging)

        def finish():
            for outs, block in zip(output_lists, staging.split(flat.numel())):
                for o, part in zip(outs, block.split(sizes)):
                    o.copy_(part.view(o.shape))
        return self._submit(what, work, output_lists, finish, (flat, staging))

    def gather(self, output_tensors, input_tensors, opts=None):
        what = "gather"
        t = _one(what, input_tensors)
        _check(what, [t])
        root = self._root(what, opts.rootRank if opts is not None else 0)
        mine = self.rank() == root
        if mine:
            outs = _one(what, output_tensors, "output list")
            self._outputs(what, outs, t)
        staging = t.new_empty(self.size() * t.numel())
        work = self._gather_into(what, t, [t.numel()] * self.size(), staging)

        def finish():
            if mine:
                for o, part in zip(outs, staging.split(t.numel())):
                    o.copy_(part.view(o.shape))
        return self._submit(what, work, output_tensors, finish, (t, staging))

    def gather_single(self, output, input, opts=None):
        what = "gather"
        _check(what, [input])
        root = self._root(what, opts.rootRank if opts is not None else 0)
        mine = self.rank() == root
        if mine:
            _check(what, [output], like=input, name="output")
            if output.numel() != self.size() * input.numel():
                raise ValueError(error(what, f"the output holds {output.numel()} elements; it must hold "
                                       f"{self.size()} x {input.numel()} (ranks x input elements)"))
        staging = output if mine else input.new_empty(self.size() * input.numel())
        work = self._gather_into(what, input, [input.numel()] * self.size(), staging)
        return self._submit(what, work, [output], keep=(input, staging))

    def scatter(self, output_tensors, input_tensors, opts=None):
        what = "scatter"
        out = _one(what, output_tensors)
        _check(what, [out])
        root = self._root(what, opts.rootRank if opts is not None else 0)
        n = out.numel()
        staging = out.new_empty(self.size() * n)
        if self.rank() == root:
            ins = _one(what, input_tensors, "input list")
            _check(what, ins, like=out, name="input tensor")
            if len(ins) != self.size() or any(i.numel() != n for i in ins):
                raise ValueError(error(what, f"needs {self.size()} input tensors of {n} elements "
                                       f"(the output's), got sizes {[i.numel() for i in ins]}"))
            torch.cat([i.reshape(-1) for i in ins], out=staging)
        code, per = _unit(out)
        work = self._comm.broadcast_async(staging.data_ptr(), staging.numel() * per, code, root, **place(staging))
        mine = staging[self.rank() * n:(self.rank() + 1) * n]
        return self._submit(what, work, output_tensors, lambda: out.copy_(mine.view(out.shape)), (staging,))

    def _alltoallv(self, send, sends, out, recvs, unit):
        """kolo's alltoallv from `send` into `out` (contiguous tensors of one
        dtype and device): sends[j] blocks of `unit` elements to rank j,
        recvs[j] from rank j, packed in rank order. The ranks check each
        other's sizes inside it: a disagreement is the same error on every
        rank, never a hang. kolo's alltoallv takes host memory only (kolo.h):
        CUDA tensors go through host copies. Returns (work, back, staged):
        back() copies the result into `out` (None on the CPU), `staged` the
        host copies the op must keep."""
        code, per = _unit(send)
        hs, ho, back = through_host(send, out)
        work = self._comm.alltoallv_async(hs.data_ptr(), [x * unit * per for x in sends], [],
                                          ho.data_ptr(), [x * unit * per for x in recvs], [], code)
        return work, back, (hs, ho)

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        what = "all_to_all_single"
        _check(what, [input])
        _check(what, [output], like=input, name="output")
        n = self.size()
        if not output_split_sizes and not input_split_sizes:
            if input.numel() % n or output.numel() != input.numel():
                raise ValueError(error(what, f"input ({input.numel()} elements) and output "
                                       f"({output.numel()}) must be equal and divisible by {n} ranks"))
            code, per = _unit(input)
            work = self._comm.alltoall_async(input.data_ptr(), output.data_ptr(), input.numel() // n * per, code,
                                             **place(input))
            return self._submit(what, work, [output], keep=(input,))
        if input.dim() == 0 or output.dim() == 0 or input.shape[1:] != output.shape[1:]:
            raise ValueError(error(what, f"split sizes need input and output of equal row shape, got "
                                   f"{tuple(input.shape)} and {tuple(output.shape)}"))
        row = math.prod(input.shape[1:])
        sends = split_rows(what, input.shape[0], input_split_sizes or None, n, "input_split_sizes")
        recvs = split_rows(what, output.shape[0], output_split_sizes or None, n, "output_split_sizes")
        work, back, staged = self._alltoallv(input, sends, output, recvs, row)
        return self._submit(what, work, [output], back, (input,) + staged)  # the CUDA tensor first: _stream_of

    def alltoall(self, output_tensors, input_tensors, opts=None):
        what = "alltoall"
        n = self.size()
        if len(input_tensors) != n or len(output_tensors) != n:
            raise ValueError(error(what, f"needs {n} input and {n} output tensors, got "
                                   f"{len(input_tensors)} and {len(output_tensors)}"))
        _check(what, input_tensors, like=input_tensors[0], name="input tensor")
        _check(what, output_tensors, like=input_tensors[0], name="output tensor")
        send = torch.cat([t.reshape(-1) for t in input_tensors])
        recv = send.new_empty(sum(o.numel() for o in output_tensors))

        work, back, staged = self._alltoallv(send, [t.numel() for t in input_tensors], recv,
                                             [o.numel() for o in output_tensors], 1)

        def finish():
            if back is not None:
                back()
            for o, r in zip(output_tensors, recv.split([o.numel() for o in output_tensors])):
                o.copy_(r.view(o.shape))
        return self._submit(what, work, output_tensors, finish, (send, recv) + staged)

    def barrier(self, opts=None):
        return self._submit("barrier", self._comm.barrier_async(), [])

    # -- point to point -----------------------------------------------------

    def _no_p2p(self, what):
        raise RuntimeError(error(what, "point-to-point send/recv is not supported by the kolo backend "
                                 "(kolo has collectives only); use broadcast/scatter/alltoall, or a "
                                 "gloo group for point-to-point traffic"))

    def send(self, tensors, dst, tag=0):
        self._no_p2p("send")

    def recv(self, tensors, src, tag=0):
        self._no_p2p("recv")

    def recv_anysource(self, tensors, tag=0):
        self._no_p2p("recv")

    def shutdown(self):
        self._completer.stop()

    # torch 2.x asks the group for its per-device backend (init_process_group
    # with device_id=, subgroup splitting). This group is its own CPU and CUDA backend.
    supports_splitting = False

    def _get_backend(self, device):
        device = torch.device(device)
        if device.type not in _DEVICES:
            raise RuntimeError(error("process group", f"the kolo backend serves {' and '.join(_DEVICES)} "
                                     f"tensors, not device {device}"))
        return self


_COLLECTIVES = ("allreduce", "allreduce_coalesced", "reduce", "reduce_scatter", "reduce_scatter_single",
                "reduce_scatter_single_coalesced", "broadcast", "allgather", "all_gather_single",
                "all_gather_single_coalesced", "allgather_coalesced", "gather", "gather_single", "scatter",
                "all_to_all_single", "alltoall", "barrier")
# torch 1.13 to 2.14 (and C++ callers of the older virtuals) use the older names.
_OLDER_NAMES = {"_allgather_base": "all_gather_single",
                "allgather_into_tensor_coalesced": "all_gather_single_coalesced",
                "_reduce_scatter_base": "reduce_scatter_single",
                "reduce_scatter_tensor_coalesced": "reduce_scatter_single_coalesced",
                "alltoall_base": "all_to_all_single", "gather_into_tensor": "gather_single"}
if hasattr(getattr(torch, "compiler", None), "disable"):
    # Under torch.compile (2.x) the ops run as plain Python, outside the graph:
    # they issue kolo's collectives through a binding dynamo cannot trace.
    for _name in _COLLECTIVES:
        setattr(ProcessGroupKolo, _name, torch.compiler.disable(getattr(ProcessGroupKolo, _name)))
for _older, _name in _OLDER_NAMES.items():
    setattr(ProcessGroupKolo, _older, getattr(ProcessGroupKolo, _name))


_default_groups = 0  # default groups this process has created (see _create)


def _create(opts, backend_options=None):
    """The creator, with torch's extended API (torch 1.13 and 2.x): opts has the
    store, rank and size, the group's global ranks and (2.x) torch's own group,
    whose device binding (init_process_group's device_id) this group takes over
    since torch uses the returned group in its place."""
    global _default_groups
    ranks = list(opts.global_ranks_in_group)
    if not ranks:
        _default_groups += 1
    # torch's group names start again after destroy_process_group; kolo's
    # communicator lives on, so a group's key space also names the default
    # group it belongs to (every rank creates that one: the count agrees).
    name = f"{_default_groups}.{opts.group_id}".replace("/", "_")
    comm = communicator_for(opts.store, opts.group_rank, opts.group_size, ranks, name)
    pg = ProcessGroupKolo(comm, opts.group_rank, opts.group_size)
    bound = getattr(getattr(opts, "process_group", None), "bound_device_id", None)
    if bound is not None:
        pg.bound_device_id = bound
    if hasattr(pg, "_register_backend"):
        # torch 2.x keeps a group's name in its per-device backends (group_name,
        # the flight recorder, torch.compile's functional collectives read it):
        # a group with none has no name. This one holds the name only; the ops
        # stay the group's own (C++ callers reach them through the group).
        # One holder for both devices: torch keeps one backend per type (CUSTOM).
        holder = _name_holder(opts.group_rank, opts.group_size)
        if holder is not None:
            pg._set_default_backend(dist.ProcessGroup.BackendType.CUSTOM)
            for device in _DEVICES:
                pg._register_backend(torch.device(device), dist.ProcessGroup.BackendType.CUSTOM, holder)
    return pg


if hasattr(dist.ProcessGroup, "_register_backend"):
    class _NameHolder(torch._C._distributed_c10d.Backend):
        """The CPU backend entry of a kolo group on torch 2.x (see _create)."""

        def getBackendName(self):
            return "kolo"


def _name_holder(rank, size):
    """A _NameHolder, or None where torch's Backend has no Python constructor
    (torch 2.11): then the group keeps its name itself (ProcessGroupKolo.group_name)."""
    try:
        return _NameHolder(rank, size)
    except TypeError:
        return None


def _register():
    install_env_handler()
    if getattr(dist.Backend, "KOLO", None) is not None:
        return  # registered already (module reloaded)
    if "devices" in inspect.signature(dist.Backend.register_backend).parameters:
        # torch 2.x: the creator returns a ProcessGroup subclass, which torch
        # takes as the group itself; the devices bind CPU and CUDA tensors to it
        # (a list: torch >= 2.5 also accepts a string, 2.0-2.4 only a list).
        dist.Backend.register_backend("kolo", _create, extended_api=True, devices=list(_DEVICES))
    else:
        dist.Backend.register_backend("kolo", _create, extended_api=True)


if dist.is_available():
    _register()
