"""Alltoall with split sizes, the one way kolo's Python fronts do it (the Horovod
API's alltoall with splits=, and the "kolo" process group's alltoall_base and
alltoall): kolo's alltoall moves equal blocks, so every rank pads its blocks to
the largest block any rank sends, and each receiver keeps the rows it was sent
of each block. The callers learn the sizes (an allgather, which also lets them
check that the ranks agree) before they start it."""
import torch

from kolo.torch import dtypes


def start(comm, blocks, width, whole=None):
    """Starts sending blocks[j] (tensors of equal shape beyond dim 0) to rank j.

    width: the most rows any rank sends in one block (the same on every rank).
    whole: the blocks already back to back in one contiguous tensor, each
    `width` rows long: sent as it is, without the padded copy.
    Returns (work, recv, keep): the kolo Work; recv, of shape
    (ranks, width, ...), in which rank j's block to this rank lies at the start
    of recv[j] once the work completed (unpad); and the buffers to keep alive
    until then."""
    n = len(blocks)
    first = blocks[0]
    tail = tuple(first.shape[1:])
    if whole is None:
        send = first.new_zeros((n, width) + tail)
        for j, b in enumerate(blocks):
            send[j, :b.shape[0]] = b
    else:
        send = whole
    recv = first.new_empty((n, width) + tail)
    code, count = dtypes.move_code(recv)
    work = comm.alltoall_async(send.data_ptr(), recv.data_ptr(), count // n, code, **dtypes.place(recv))
    return work, recv, (send, recv)


def unpad(recv, counts):
    """The received blocks: counts[j] rows from rank j."""
    return [recv[j, :c] for j, c in enumerate(counts)]
