"""Horovod's Keras API for Keras 3 on kolo: ``import kolo.tensorflow.keras as hvd``.

DistributedOptimizer wraps a Keras optimizer's gradient step; the callbacks
are in kolo.tensorflow.keras.callbacks (as horovod.tensorflow.keras.callbacks).
The collectives take Keras/TF tensors and return tf.Tensors. Elastic
training: kolo.tensorflow.keras.elastic (hvd.elastic)."""
from kolo.tensorflow import (KoloError, init, shutdown, is_initialized, rank, size,  # noqa: F401
                             local_rank, local_size, cross_rank, cross_size, Average, Sum, Min,
                             Max, Product, Adasum, Compression, allreduce, allgather, broadcast,
                             reducescatter, broadcast_object, allgather_object, join,
                             broadcast_variables, broadcast_global_variables, ProcessSet,
                             add_process_set, remove_process_set, global_process_set)
from kolo.tensorflow import HostsUpdatedInterrupt, HorovodInternalError  # noqa: F401
from kolo.tensorflow import (start_timeline, stop_timeline, mpi_threads_supported,  # noqa: F401
                             mpi_enabled, mpi_built, gloo_enabled, gloo_built, nccl_built,
                             ddl_built, ccl_built, cuda_built, rocm_built)
from kolo.tensorflow.keras import callbacks, elastic  # noqa: F401
from kolo.tensorflow.keras.optimizer import DistributedOptimizer, PartialDistributedOptimizer  # noqa: F401

