"""Horovod's build queries (hvd.mpi_built(), hvd.nccl_built(), ...), the same
for every framework layer: kolo's engine has its own transports (shared
memory, TCP) and none of MPI, Gloo, NCCL, DDL, oneCCL or ROCm; CUDA where it
was built with the CUDA toolkit (collectives on CUDA tensors)."""
from kolo import _C


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
    return _C.cuda_built()


def rocm_built():
    return False

