"""Horovod's PyTorch API on kolo: ``import kolo.torch as hvd``.

Names, arguments and defaults follow ``horovod.torch``. Differences (see
python/README.md): collectives are matched by call order, not by name;
CPU tensors only; no Adasum. Process sets (kolo/process_sets.py) are
Horovod's, each a kolo sub-communicator.
"""
from kolo._C import Error as KoloError
from kolo.basics import (init, shutdown, is_initialized, rank, size, local_rank, local_size,
                         cross_rank, cross_size, start_timeline, stop_timeline)
from kolo.process_sets import (ProcessSet, add_process_set, remove_process_set,
                               global_process_set)
from kolo.torch.dtypes import Average, Sum, Min, Max, Product, Adasum, ReduceOp
from kolo.torch.compression import Compression
from kolo.torch.collectives import (
    allreduce_async, allreduce_async_, allreduce_,
    grouped_allreduce_async, grouped_allreduce_async_, grouped_allreduce_,
    allgather_async, grouped_allgather_async,
    broadcast_async, broadcast_async_, broadcast_,
    alltoall_async, reducescatter_async, grouped_reducescatter_async, sparse_allreduce_async,
    barrier, poll, synchronize)
from kolo.torch.autograd import (allreduce, grouped_allreduce, allgather, grouped_allgather,
                                 broadcast, alltoall, reducescatter, grouped_reducescatter)
from kolo.torch.functions import (broadcast_parameters, broadcast_optimizer_state,
                                  broadcast_object, allgather_object)
from kolo.torch.optimizer import DistributedOptimizer, join
from kolo.torch.sync_batch_norm import SyncBatchNorm
# Registers the torch.distributed backend "kolo" (init_process_group("kolo")).
from . import process_group  # noqa: E402,F401

# Horovod's exception for a failed collective; kolo raises kolo.KoloError.
HorovodInternalError = KoloError


def mpi_threads_supported():
    return False


def mpi_enabled():
    return False


def mpi_built():
    return False


def gloo_enabled():
    return False


def gloo_built():
    return False


def nccl_built():
    return 0


def ddl_built():
    return False


def ccl_built():
    return False


def cuda_built():
    return False


def rocm_built():
    return False

