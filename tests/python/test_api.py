"""kolo.torch's collectives per dtype/op/size and their gradients
(workers/api_worker.py) on 1, 2 and 3 ranks, shared memory and TCP."""
import pytest

from launch import assert_ok, run


@pytest.mark.parametrize("np,transport", [(1, None), (2, "shm"), (3, "shm"), (3, "tcp")])
def test_collectives_and_gradients(np, transport):
    proc = run(np, "api_worker.py", transport=transport)
    assert_ok(proc, np, "api")


def test_ranks_on_two_emulated_hosts():
    proc = run(4, "hosts_worker.py", 2,
               shell_prefix='KOLO_HOSTNAME=host$((KOLO_RANK % 2)); export KOLO_HOSTNAME;')
    assert_ok(proc, 4, "hosts")
