"""kolo: data-parallel distributed training on kolo's C++ engine.

``import kolo.torch as hvd`` gives Horovod's PyTorch API; this package holds
the framework-neutral part (the communicator and who-am-I queries).
The extension ``kolo._C`` binds the C++ API on raw buffers (see
python/src/module.cc) and never links LibTorch.
"""
from kolo._C import Error as KoloError
from kolo.basics import (init, shutdown, is_initialized, rank, size, local_rank, local_size,
                         cross_rank, cross_size, transport)

__version__ = "0.1"

__all__ = ["KoloError", "init", "shutdown", "is_initialized", "rank", "size", "local_rank",
           "local_size", "cross_rank", "cross_size", "transport"]
