"""Refused inputs and mismatched calls raise on every rank with their text
(workers/errors_worker.py), on shared memory and TCP; after a mismatch the
communicator remains usable or (where not every rank caught it) is formed
anew with shutdown() and init()."""
import pytest

from launch import assert_ok, run


# Every rank of one host catches a mismatch at the fingerprint check: the
# communicator must remain usable. Over TCP a rank that receives nothing from
# a disagreeing peer (a broadcast's root, a ring's far side) sees only that
# peer fail: then it must be unusable (tests/collectives/mismatch_test.sh
# checks the TCP case that does recover).
@pytest.mark.parametrize("np,transport,mode", [(2, "shm", "usable"), (3, "tcp", "either")])
def test_errors_on_every_rank(np, transport, mode):
    assert_ok(run(np, "errors_worker.py", mode, transport=transport), np, "errors")
