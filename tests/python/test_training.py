"""DistributedOptimizer equals the single-process large-batch run, join()
with uneven batches (workers/training_worker.py), and a rank killed in the
middle of training."""
import pytest

from launch import assert_ok, run, run_killed_rank


@pytest.mark.parametrize("np,transport", [(1, None), (2, "shm"), (3, "tcp")])
def test_optimizer_and_join(np, transport):
    assert_ok(run(np, "training_worker.py", "optimizer,join", transport=transport), np, "training")


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_killed_rank(transport):
    texts = run_killed_rank("training_worker.py", "kill", transport)
    for r, text in texts.items():
        assert text.startswith(f"kolo rank {r}: "), text
