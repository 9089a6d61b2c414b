"""A rank 0 that ends right after hvd.init() must not make a slower peer fail
(Horovod's test_horovod_alltoall_splits_error failed 1 run in 2 on 2 ranks
under mpirun: "lost connection to the rendezvous store"). Where rank 0 hosts
the store (a plain mpirun, torchrun-style variables) it keeps it up until
its peers are done with it (src/rendezvous/hosted_store.h). Rank 1 is slowed
inside init() (KOLO_TEST_STORE_WAIT_DELAY_MS before each of its store waits) so
that rank 0 ends between rank 1's last two store requests on every run."""
import os
import re
import shutil
import subprocess
import sys

import pytest

from launch import DEADLINE_S, HERE, run_torchrun_style

WORKER = os.path.join(HERE, "workers", "early_exit_worker.py")
# Rank 1's delay: longer than rank 0 takes from the end of init() to the end of
# its process (Python's finalization: 0.8 s with torch 1.13, 2.4 s with torch
# 2.15 on the loaded 2-core VM), so that without the fix the store is gone.
# Under heavier load rank 0 may take longer than that: then the window was
# missed (rank 0 did not linger, as nobody was left), which proves nothing
# either way, and the job runs again with a longer delay.
DELAYS_MS = (6000, 15000, 30000)


def slow_rank_1(delay_ms):
    return (f'[ "${{RANK:-$OMPI_COMM_WORLD_RANK}}" = 1 ] && export KOLO_TEST_STORE_WAIT_DELAY_MS={delay_ms}; '
            'export KOLO_LOG=info; exec "$0" "$@"')


# Rank 0 says so when it keeps serving the store for rank 1 (the window was hit).
LINGERED = re.compile(r"kolo rank 0: info: rendezvous: .*keeps serving the store until rank 1\b")


def until_window_hit(job):
    """Runs job(delay_ms) -> (rank 0's output, all output), each run's outcome
    checked by job itself, until rank 0 lingered for rank 1."""
    for delay_ms in DELAYS_MS:
        out0, out = job(delay_ms)
        if LINGERED.search(out0):
            return
    pytest.fail(f"rank 0 never lingered for rank 1 (delays {DELAYS_MS} ms): the window under test was "
                f"never hit:\n{out[-4000:]}")


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI's mpirun is not installed")
@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_mpirun_rank0_done_first(transport):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KOLO_", "MASTER_"))}
    env["KOLO_TRANSPORT"] = transport

    def job(delay_ms):
        proc = subprocess.run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", "-x", "KOLO_TRANSPORT",
                               "/bin/sh", "-c", slow_rank_1(delay_ms), sys.executable, "-W", "ignore", WORKER,
                               "caught"],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=DEADLINE_S)
        out = proc.stdout
        assert proc.returncode == 0, out[-4000:]
        for r in range(2):
            assert f"early_exit rank {r} of 2: ValueError raised" in out, out[-4000:]
        return out, out

    until_window_hit(job)


def test_torchrun_style_rank0_raises():
    """Rank 0's ValueError ends its program (exit 1); rank 1 still finishes init()."""
    def job(delay_ms):
        results = run_torchrun_style(2, ["/bin/sh", "-c", slow_rank_1(delay_ms), sys.executable, "-W", "ignore",
                                         WORKER, "raise"])
        (code0, out0), (code1, out1) = results
        assert code0 == 1 and "ValueError" in out0, out0[-4000:]
        assert code1 == 0 and "early_exit rank 1 of 2: ValueError raised" in out1, out1[-4000:]
        return out0, out0 + out1

    until_window_hit(job)

