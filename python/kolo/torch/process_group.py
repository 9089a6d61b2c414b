"""The torch.distributed backend "kolo": kolo's engine under ``init_process_group("kolo")``.

``import kolo.torch`` registers it; after that an unchanged DDP program runs on
kolo with ``dist.init_process_group("kolo")`` — through ``env://`` with
MASTER_ADDR/MASTER_PORT (torchrun style), or with no MASTER_* variables at all
under kolorun, mpirun or srun (kolo's own discovery; see
process_group_rendezvous.py). The group shares its communicator with
``kolo.torch``'s Horovod API, so both may be used in one program (their
collectives then share one order, as every collective on a communicator does).

Pure Python on torch's public API and kolo's binding: no LibTorch is linked,
so one build serves torch 1.13 and 2.x. Every op issues kolo's asynchronous
collective and returns a KoloWork (process_group_work.py); DDP's Reducer reads
the results through the work's future, so backward overlaps communication.

How each op maps onto kolo's collectives (CPU tensors, contiguous; kolo's 7
dtypes natively, int8/int16/bool as kolo.torch.dtypes maps them, any other
dtype is an error naming it):

  allreduce            allreduce: SUM, AVG (floating types only), MIN, MAX, PRODUCT;
                       BAND/BOR/BXOR/PREMUL_SUM are an error naming the op
  allreduce_coalesced  one allreduce of the concatenated tensors (one dtype)
  broadcast            broadcast
  allgather            allgather, or allgatherv when the output tensors differ in size
  _allgather_base      allgather into the output tensor (all_gather_into_tensor)
  allgather_coalesced  one allgather of the concatenated tensors
  reduce_scatter, _reduce_scatter_base   reduce_scatter
  alltoall_base        alltoall; with split sizes, one small allgather of every
                       rank's split sizes (checked against each other on every
                       rank) and an alltoall of blocks padded to the largest split
  alltoall             the same, on lists of tensors
  barrier              barrier
  reduce               allreduce (non-root ranks into scratch: their tensor is unchanged)
  gather               allgather (non-root ranks discard it)
  scatter              broadcast of the root's concatenated inputs
  send, recv           an error: kolo has collectives only

Limits: groups of all ranks only (``new_group`` of a subset is an error naming
both sizes); one tensor per call (the per-GPU tensor lists of other backends
are an error); timeouts are kolo's (KOLO_TIMEOUT_MS), not ``timeout=``.
"""
import inspect
import math

import torch
import torch.distributed as dist

from kolo import _C
from kolo.basics import error
from kolo.torch import alltoallv, dtypes
from kolo.torch.process_group_rendezvous import communicator_for, install_env_handler
from kolo.torch.process_group_work import Completer

_OPS = {"SUM": _C.SUM, "AVG": _C.AVERAGE, "MIN": _C.MIN, "MAX": _C.MAX, "PRODUCT": _C.PRODUCT}


def _op_code(what, opts):
    op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
    name = getattr(getattr(op, "op", op), "name", str(op))
    code = _OPS.get(name)
    if code is None:
        raise ValueError(error(what, f"ReduceOp.{name} is not supported by the kolo backend "
                               "(supported: SUM, AVG, MIN, MAX, PRODUCT)"))
    return code


def _one(what, items, kind="tensor"):
    if len(items) != 1:
        raise ValueError(error(what, f"the kolo backend takes one {kind} per call, got {len(items)} "
                               "(several are for backends with one per GPU)"))
    return items[0]


def _check(what, tensors, like=None, name="tensor"):
    """Every tensor is one kolo can read in place, with like's dtype."""
    for t in tensors:
        dtypes.check_tensor(what, t, name)
        if like is not None and t.dtype != like.dtype:
            raise TypeError(error(what, f"{name} has dtype {t.dtype} but the input has {like.dtype}"))


def _unit(t):
    """(kolo dtype code, kolo elements per element of t) for moving t's bytes."""
    code, _ = dtypes.move_code(t)
    return code, (t.element_size() if code == _C.U8 else 1)


def _reduction_buffer(what, t, op):
    """(buffer, dtype code, op code, copy_back): t itself, t's bytes as u8
    (bool), or a widened copy (int8, int16) that copy_back must narrow into t."""
    if op == _C.AVERAGE and not t.is_floating_point():
        raise TypeError(error(what, f"ReduceOp.AVG is defined for floating tensors only, not {t.dtype} "
                              "(kolo does not truncate; use SUM and divide)"))
    wide, code, op = dtypes.reduce_plan(what, t, op)
    if wide is None:
        return t, code, op, False
    if t.dtype == torch.bool:
        return t.view(torch.uint8), code, op, False
    return t.to(wide), code, op, True


def _splits(what, name, sizes, rows, n):
    if not sizes:
        if rows % n:
            raise ValueError(error(what, f"{name} has {rows} rows, which do not split evenly over "
                                   f"{n} ranks; pass {name}_split_sizes"))
        return [rows // n] * n
    sizes = [int(s) for s in sizes]
    if len(sizes) != n or min(sizes) < 0 or sum(sizes) != rows:
        raise ValueError(error(what, f"{name}_split_sizes {sizes} must be {n} non-negative sizes "
                               f"that add up to the {rows} rows of {name}"))
    return sizes


class ProcessGroupKolo(dist.ProcessGroup):
    """A torch ProcessGroup whose every op is a kolo collective (see the module text)."""

    def __init__(self, comm, rank, size):
        super().__init__(rank, size)
        self._comm = comm
        self._completer = Completer()

    def getBackendName(self):
        return "kolo"

    def _submit(self, what, kolo_work, value, finish=None, keep=()):
        return self._completer.submit(what, kolo_work, value, finish, keep)

    def _root(self, what, root):
        if not 0 <= root < self.size():
            raise ValueError(error(what, f"root rank {root} is not in 0..{self.size() - 1}"))
        return root

    # -- reductions ---------------------------------------------------------

    def allreduce(self, tensors, opts=None):
        what = "allreduce"
        t = _one(what, tensors)
        _check(what, [t])
        buf, code, op, back = _reduction_buffer(what, t, _op_code(what, opts))
        work = self._comm.allreduce_async(buf.data_ptr(), buf.data_ptr(), buf.numel(), code, op)
        return self._submit(what, work, tensors, (lambda: t.copy_(buf)) if back else None, (buf,))

    def allreduce_coalesced(self, tensors, opts=None):
        what = "allreduce_coalesced"
        if not tensors:
            return self._submit(what, None, tensors)
        _check(what, tensors, like=tensors[0])
        flat = torch.cat([t.reshape(-1) for t in tensors])
        buf, code, op, back = _reduction_buffer(what, flat, _op_code(what, opts))
        work = self._comm.allreduce_async(buf.data_ptr(), buf.data_ptr(), buf.numel(), code, op)

        def finish():
            result = buf.to(flat.dtype) if back else flat
            for t, part in zip(tensors, result.split([t.numel() for t in tensors])):
                t.copy_(part.view(t.shape))
        return self._submit(what, work, tensors, finish, (buf, flat))

    def reduce(self, tensors, opts=None):
        what = "reduce"
        t = _one(what, tensors)
        _check(what, [t])
        root = self._root(what, opts.rootRank if opts is not None else 0)
        buf, code, op, back = _reduction_buffer(what, t, _op_code(what, opts))
        mine = self.rank() == root
        out = buf if mine else torch.empty_like(buf)
        work = self._comm.allreduce_async(buf.data_ptr(), out.data_ptr(), buf.numel(), code, op)
        return self._submit(what, work, tensors, (lambda: t.copy_(buf)) if back and mine else None,
                            (buf, out))

    def _reduce_scatter_into(self, what, flat, output, opts):
        buf, code, op, back = _reduction_buffer(what, flat, _op_code(what, opts))
        if back:
            out = torch.empty(output.numel(), dtype=buf.dtype)
        else:
            out = output.view(torch.uint8) if output.dtype == torch.bool else output
        work = self._comm.reduce_scatter_async(buf.data_ptr(), out.data_ptr(), output.numel(), code, op)
        finish = (lambda: output.copy_(out.view(output.shape))) if back else None
        return self._submit(what, work, [output], finish, (buf, out))

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        what = "reduce_scatter"
        out = _one(what, output_tensors)
        ins = _one(what, input_tensors, "input list")
        _check(what, [out])
        _check(what, ins, like=out, name="input tensor")
        if len(ins) != self.size() or any(i.numel() != out.numel() for i in ins):
            raise ValueError(error(what, f"needs {self.size()} input tensors of {out.numel()} elements "
                                   f"(the output's), got sizes {[i.numel() for i in ins]}"))
        return self._reduce_scatter_into(what, torch.cat([i.reshape(-1) for i in ins]), out, opts)

    def _reduce_scatter_base(self, output, input, opts=None):
        what = "reduce_scatter_tensor"
        _check(what, [input])
        _check(what, [output], like=input, name="output")
        if input.numel() != self.size() * output.numel():
            raise ValueError(error(what, f"the input holds {input.numel()} elements; it must hold "
                                   f"{self.size()} x {output.numel()} (ranks x output elements)"))
        return self._reduce_scatter_into(what, input, output, opts)

    # -- data movement ------------------------------------------------------

    def broadcast(self, tensors, opts=None):
        what = "broadcast"
        t = _one(what, tensors)
        _check(what, [t])
        root = self._root(what, opts.rootRank if opts is not None else 0)
        code, count = dtypes.move_code(t)
        work = self._comm.broadcast_async(t.data_ptr(), count, code, root)
        return self._submit(what, work, tensors)

    def _gather_into(self, what, t, counts, staging):
        """Issues the allgather(v) of t into staging; counts are elements per rank."""
        code, per = _unit(t)
        if len(set(counts)) == 1:
            return self._comm.allgather_async(t.data_ptr(), staging.data_ptr(), t.numel() * per, code)
        return self._comm.allgatherv_async(t.data_ptr(), staging.data_ptr(), [c * per for c in counts], code)

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
        staging = torch.empty(sum(counts), dtype=t.dtype)
        work = self._gather_into(what, t, counts, staging)

        def finish():
            for o, part in zip(outs, staging.split(counts)):
                o.copy_(part.view(o.shape))
        return self._submit(what, work, output_tensors, finish, (t, staging))

    def _allgather_base(self, output, input, opts=None):
        what = "all_gather_into_tensor"
        _check(what, [input])
        _check(what, [output], like=input, name="output")
        if output.numel() != self.size() * input.numel():
            raise ValueError(error(what, f"the output holds {output.numel()} elements; it must hold "
                                   f"{self.size()} x {input.numel()} (ranks x input elements)"))
        code, per = _unit(input)
        work = self._comm.allgather_async(input.data_ptr(), output.data_ptr(), input.numel() * per, code)
        return self._submit(what, work, [output], keep=(input,))

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
        staging = torch.empty(self.size() * flat.numel(), dtype=flat.dtype)
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
        staging = torch.empty(self.size() * t.numel(), dtype=t.dtype)
        work = self._gather_into(what, t, [t.numel()] * self.size(), staging)

        def finish():
            if mine:
                for o, part in zip(outs, staging.split(t.numel())):
                    o.copy_(part.view(o.shape))
        return self._submit(what, work, output_tensors, finish, (t, staging))

    def scatter(self, output_tensors, input_tensors, opts=None):
        what = "scatter"
        out = _one(what, output_tensors)
        _check(what, [out])
        root = self._root(what, opts.rootRank if opts is not None else 0)
        n = out.numel()
        staging = torch.empty(self.size() * n, dtype=out.dtype)
        if self.rank() == root:
            ins = _one(what, input_tensors, "input list")
            _check(what, ins, like=out, name="input tensor")
            if len(ins) != self.size() or any(i.numel() != n for i in ins):
                raise ValueError(error(what, f"needs {self.size()} input tensors of {n} elements "
                                       f"(the output's), got sizes {[i.numel() for i in ins]}"))
            torch.cat([i.reshape(-1) for i in ins], out=staging)
        code, per = _unit(out)
        work = self._comm.broadcast_async(staging.data_ptr(), staging.numel() * per, code, root)
        mine = staging[self.rank() * n:(self.rank() + 1) * n]
        return self._submit(what, work, output_tensors, lambda: out.copy_(mine.view(out.shape)), (staging,))

    def _alltoallv(self, what, blocks, recv_counts, unit, unit_name, deliver):
        """Sends blocks[j] (flat tensors) to rank j and receives recv_counts[j]
        elements from rank j. Returns (kolo work, finish, buffers to keep);
        finish hands deliver() the received blocks.

        One allgather of every rank's send and receive sizes lets every rank
        check all of them (a disagreement is the same error on every rank,
        never a hang) and agree on the padded block width of the alltoall."""
        n = self.size()
        mine = torch.tensor([b.numel() for b in blocks] + list(recv_counts), dtype=torch.int64)
        every = torch.empty(n * 2 * n, dtype=torch.int64)
        self._comm.allgather(mine.data_ptr(), every.data_ptr(), 2 * n, _C.I64)
        sends, expects = every.view(n, 2, n).unbind(1)
        bad = (sends != expects.t()).nonzero()
        if bad.numel():
            i, j = bad[0].tolist()
            raise ValueError(error(what, f"rank {i} sends {int(sends[i, j]) // unit} {unit_name} to rank {j}, "
                                   f"but rank {j} expects {int(expects[j, i]) // unit} from rank {i} "
                                   "(input and output split sizes disagree)"))
        width = int(sends.max()) if n else 0
        work, recv, keep = alltoallv.start(self._comm, blocks, width)
        return work, lambda: deliver(alltoallv.unpad(recv, recv_counts)), keep

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        what = "alltoall_base"
        _check(what, [input])
        _check(what, [output], like=input, name="output")
        n = self.size()
        if not output_split_sizes and not input_split_sizes:
            if input.numel() % n or output.numel() != input.numel():
                raise ValueError(error(what, f"input ({input.numel()} elements) and output "
                                       f"({output.numel()}) must be equal and divisible by {n} ranks"))
            code, per = _unit(input)
            work = self._comm.alltoall_async(input.data_ptr(), output.data_ptr(), input.numel() // n * per, code)
            return self._submit(what, work, [output], keep=(input,))
        if input.dim() == 0 or output.dim() == 0 or input.shape[1:] != output.shape[1:]:
            raise ValueError(error(what, f"split sizes need input and output of equal row shape, got "
                                   f"{tuple(input.shape)} and {tuple(output.shape)}"))
        row = math.prod(input.shape[1:])
        sends = _splits(what, "input", input_split_sizes, input.shape[0], n)
        recvs = _splits(what, "output", output_split_sizes, output.shape[0], n)
        blocks = input.reshape(-1).split([s * row for s in sends])
        flat_out = output.view(-1)

        def deliver(received):
            torch.cat(received, out=flat_out)
        work, finish, keep = self._alltoallv(what, blocks, [r * row for r in recvs], row, "rows", deliver)
        return self._submit(what, work, [output], finish, keep)

    def alltoall(self, output_tensors, input_tensors, opts=None):
        what = "alltoall"
        n = self.size()
        if len(input_tensors) != n or len(output_tensors) != n:
            raise ValueError(error(what, f"needs {n} input and {n} output tensors, got "
                                   f"{len(input_tensors)} and {len(output_tensors)}"))
        _check(what, input_tensors, like=input_tensors[0], name="input tensor")
        _check(what, output_tensors, like=input_tensors[0], name="output tensor")

        def deliver(received):
            for o, r in zip(output_tensors, received):
                o.copy_(r.view(o.shape))
        work, finish, keep = self._alltoallv(what, [t.reshape(-1) for t in input_tensors],
                                             [o.numel() for o in output_tensors], 1, "elements", deliver)
        return self._submit(what, work, output_tensors, finish, keep)

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


def _create(store, rank, size, timeout):
    return ProcessGroupKolo(communicator_for(store, rank, size), rank, size)


def _register():
    install_env_handler()
    if getattr(dist.Backend, "KOLO", None) is not None:
        return  # registered already (module reloaded)
    if "devices" in inspect.signature(dist.Backend.register_backend).parameters:
        # torch 2.x: UNTESTED (only torch 1.13 was at hand). Declares the CPU
        # so that init_process_group("kolo") binds CPU tensors to this group;
        # 2.x uses a ProcessGroup subclass returned by the creator as the group.
        dist.Backend.register_backend("kolo", _create, devices=["cpu"])
    else:
        dist.Backend.register_backend("kolo", _create)


if dist.is_available():
    _register()
