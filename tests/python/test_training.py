"""DistributedOptimizer equals the single-process large-batch run, join()
with uneven batches (workers/training_worker.py), and a rank killed in the
middle of training."""
import glob
import os
import subprocess
import tempfile

import pytest

from launch import assert_ok, run


@pytest.mark.parametrize("np,transport", [(1, None), (2, "shm"), (3, "tcp")])
def test_optimizer_and_join(np, transport):
    assert_ok(run(np, "training_worker.py", "optimizer,join", transport=transport), np, "training")


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_killed_rank(transport):
    with tempfile.TemporaryDirectory() as d:
        try:
            proc = run(3, "training_worker.py", "kill", d, transport=transport, grace=60)
            out = proc.stdout
            assert proc.returncode == 137, f"kolorun exited {proc.returncode}:\n{out[-4000:]}"
            assert "rank 1 was killed by signal 9" in out, out[-4000:]
            for r in (0, 2):
                with open(os.path.join(d, f"rank.{r}.err")) as f:
                    text = f.read()
                assert text.startswith(f"kolo rank {r}: ") and "rank 1" in text, text
            job = open(os.path.join(d, "job")).read().strip()
            assert not glob.glob(f"/dev/shm/kolo-{job}*"), "shared memory left behind"
            ps = subprocess.run(["ps", "-eo", "pid,args"], stdout=subprocess.PIPE, text=True).stdout
            assert d not in ps, f"processes of the job are left:\n{ps}"
        finally:
            for pidfile in glob.glob(os.path.join(d, "rank.*.pid")):
                try:
                    os.kill(int(open(pidfile).read()), 9)
                except (OSError, ValueError):
                    pass
