"""Horovod's PyTorch API on kolo: ``import kolo.torch as hvd``.

Names, arguments and defaults follow ``horovod.torch``. Differences (see
python/README.md): collectives are matched by call order, not by name;
CPU and CUDA tensors (CUDA where kolo was built with it); no Adasum. Process sets (kolo/process_sets.py) are
Horovod's, each a kolo sub-communicator.
"""
from kolo._C import Error as KoloError
from kolo.build_info import (  # noqa: F401
    mpi_threads_supported, mpi_enabled, mpi_built, gloo_enabled, gloo_built, nccl_built,
    ddl_built, ccl_built, cuda_built, rocm_built)
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


# Horovod Elastic (hvd.elastic.run, TorchState, ElasticSampler): kolo/torch/elastic/.
from kolo.elastic import HostsUpdatedInterrupt  # noqa: E402
from . import elastic  # noqa: E402,F401
