"""local_rank/local_size/cross_rank/cross_size with ranks on emulated hosts:
the test starts every rank with KOLO_HOSTNAME=host<rank % HOSTS>, so hosts
interleave (host0: ranks 0, 2, ...; host1: ranks 1, 3, ...) and kolo joins
them hierarchically (shared memory within a host, TCP between). Checks a
collective across the hosts too."""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from common import check, done  # noqa: E402

import kolo  # noqa: E402
import kolo.torch as hvd  # noqa: E402

hosts = int(sys.argv[1])
hvd.init()
R, N = hvd.rank(), hvd.size()
mine = [r for r in range(N) if r % hosts == R % hosts]
check(hvd.local_rank() == mine.index(R), f"local_rank {hvd.local_rank()}")
check(hvd.local_size() == len(mine), f"local_size {hvd.local_size()}")
check(hvd.cross_rank() == R % hosts, f"cross_rank {hvd.cross_rank()} (host index by lowest rank)")
check(hvd.cross_size() == hosts, f"cross_size {hvd.cross_size()}")
check(kolo.transport() == "hier", f"transport {kolo.transport()} across hosts")
check(hvd.allreduce(torch.tensor([float(R)]), op=hvd.Sum).item() == N * (N - 1) / 2, "allreduce")
done(f"hosts rank {R} of {N}")
