"""Horovod's test_horovod_alltoall_splits_error as a whole program: hvd.init(),
then an alltoall whose splits do not match the tensor, a ValueError raised
locally (no communication), and the process ends. Rank 0 hosts the
rendezvous store under mpirun and torchrun-style variables and ends first
while a slower peer may still be inside init(): the peer must not fail.

argv[1]: "caught" — every rank catches the ValueError and exits 0 (the
Horovod test); "raise" — rank 0 lets it end the program (a traceback, exit 1),
the other ranks catch it. Each rank that catches it prints
"early_exit rank R of N: ValueError raised"."""
import sys

import torch

import kolo.torch as hvd

hvd.init()
rank, size = hvd.rank(), hvd.size()
tensor = torch.empty(size - 1)
splits = torch.ones(size, dtype=torch.int32)
try:
    hvd.alltoall(tensor, splits)
except ValueError:
    if rank == 0 and sys.argv[1] == "raise":
        raise
    print(f"early_exit rank {rank} of {size}: ValueError raised", flush=True)
    sys.exit(0)
print(f"early_exit rank {rank} of {size}: alltoall with wrong splits did not raise", flush=True)
sys.exit(5)
