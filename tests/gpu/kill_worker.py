"""A rank killed in the middle of GPU collectives (tests/gpu/kill_test.sh).

Every rank allreduces a 64 MiB CUDA tensor in a loop; rank 1 SIGKILLs itself
after 2 s (between the engine's steps of some collective) and writes the time
first. The survivors must fail with kolo's error naming rank 1; each writes
its error and the time it saw it to RESULT_DIR/rank.R.err. KOLO_TEST_DEVICE=cpu:
the same on host memory (kill_test.sh's rehearsal)."""
import os
import signal
import sys
import threading
import time

import torch

import kolo.torch as hvd

result_dir = sys.argv[1]
hvd.init()
rank = hvd.rank()
device = os.environ.get("KOLO_TEST_DEVICE", "cuda")
if device == "cuda":
    torch.cuda.set_device(hvd.local_rank() % torch.cuda.device_count())
x = torch.ones(16 << 20, device=device)
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # kolo's own detection is what is tested
if rank == 1:
    def die():
        time.sleep(2.0)
        with open(os.path.join(result_dir, "killed_at"), "w") as f:
            f.write(repr(time.time()))
        os.kill(os.getpid(), signal.SIGKILL)
    threading.Thread(target=die, daemon=True).start()
try:
    while True:
        hvd.allreduce_(x, op=hvd.Average)
except Exception as e:  # noqa: BLE001 - the error's text is the result
    with open(os.path.join(result_dir, f"rank.{rank}.err"), "w") as f:
        f.write(f"{time.time()!r}\n{type(e).__name__}: {e}\n")
    sys.exit(3)
