"""Refused inputs and mismatched calls raise on every rank with their text
(workers/errors_worker.py), on shared memory and TCP."""
import pytest

from launch import assert_ok, run


@pytest.mark.parametrize("np,transport", [(2, "shm"), (3, "tcp")])
def test_errors_on_every_rank(np, transport):
    assert_ok(run(np, "errors_worker.py", transport=transport), np, "errors")
