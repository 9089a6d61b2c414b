"""Horovod's process sets (workers/process_sets_worker.py): disjoint sets at
once, a rank outside every set, sets added and removed, DistributedOptimizer
on a set, a mismatch in a set; on shared memory and TCP."""
import pytest

from launch import assert_ok, run


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_process_sets(transport):
    assert_ok(run(5, "process_sets_worker.py", transport=transport), 5, "process_sets")
