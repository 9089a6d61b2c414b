"""SyncBatchNorm equals BatchNorm over the global batch (forward, running
statistics, input and weight gradients; uneven batches, one rank empty on 3
ranks) — workers/sync_batch_norm_worker.py."""
import pytest

from launch import assert_ok, run


@pytest.mark.parametrize("np,transport", [(1, None), (2, "shm"), (3, "tcp")])
def test_sync_batch_norm_equals_global_batch_norm(np, transport):
    assert_ok(run(np, "sync_batch_norm_worker.py", transport=transport), np, "sync_batch_norm")
