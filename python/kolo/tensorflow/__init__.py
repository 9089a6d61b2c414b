"""Horovod's TensorFlow 2 API on kolo: ``import kolo.tensorflow as hvd``.

Names, arguments and defaults follow ``horovod.tensorflow``. Plain Python
on TensorFlow's public API over kolo._C (no TensorFlow headers or ABI:
any TF 2.x with Keras 3; tested on 2.21). Collectives run eagerly and
inside tf.function (bridge.py), CPU tensors; named ones negotiated as
Horovod's are, unnamed ones matched by call order. Keras: kolo.tensorflow.keras.
"""
from kolo._C import Error as KoloError
from kolo.build_info import (  # noqa: F401
    mpi_threads_supported, mpi_enabled, mpi_built, gloo_enabled, gloo_built, nccl_built,
    ddl_built, ccl_built, cuda_built, rocm_built)
from kolo.basics import (init, shutdown, is_initialized, rank, size, local_rank, local_size,
                         cross_rank, cross_size, start_timeline, stop_timeline)
from kolo.process_sets import (ProcessSet, add_process_set, remove_process_set,
                               global_process_set)
from kolo.reduce_ops import Average, Sum, Min, Max, Product, Adasum, ReduceOp
from kolo.tensorflow.compression import Compression
from kolo.tensorflow.collectives import (allreduce, grouped_allreduce, allgather,
                                         grouped_allgather, broadcast, broadcast_, alltoall,
                                         reducescatter, grouped_reducescatter, barrier)
from kolo.tensorflow.functions import (broadcast_variables, broadcast_global_variables,
                                       broadcast_object, broadcast_object_fn, allgather_object)
from kolo.tensorflow.fusion import join
from kolo.tensorflow.gradient_tape import DistributedGradientTape, PartialDistributedGradientTape
from kolo.tensorflow.optimizer import DistributedOptimizer
from kolo.tensorflow.sync_batch_norm import SyncBatchNormalization

# Horovod's exception for a failed collective; kolo raises kolo.KoloError
# (eagerly a tf.errors.FailedPreconditionError that is also a KoloError; in a
# graph TF's FailedPreconditionError carrying kolo's text: errors.py).
HorovodInternalError = KoloError

# Horovod Elastic (hvd.elastic.run, TensorFlowKerasState, TensorFlowState): elastic.py.
from kolo.elastic import HostsUpdatedInterrupt  # noqa: E402
from kolo.tensorflow import elastic  # noqa: E402,F401


def _constant_op(value):
    import tensorflow as tf
    return tf.constant(value, dtype=tf.int32)


def size_op(process_set_id=0, name=None):
    return _constant_op(size())


def rank_op(name=None):
    return _constant_op(rank())


def local_rank_op(name=None):
    return _constant_op(local_rank())


def local_size_op(name=None):
    return _constant_op(local_size())

