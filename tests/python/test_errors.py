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


def test_shutdown_init_with_torchrun_variables():
    """torchrun-style variables: rank 0 hosts kolo's store on MASTER_PORT, and
    the shutdown() + init() of the worker must find it again (rank 1 may
    reconnect before rank 0 has shut down: the store lives as long as rank 0's
    process, communicators keep apart by key prefix)."""
    import os
    import socket
    import subprocess
    import sys
    from launch import DEADLINE_S, HERE
    np = 2
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(np),
               LOCAL_WORLD_SIZE=str(np), PYTHONDONTWRITEBYTECODE="1")
    for v in [k for k in env if k.startswith("KOLO_")]:
        del env[v]
    worker = os.path.join(HERE, "workers", "errors_worker.py")
    procs = [subprocess.Popen([sys.executable, worker, "usable"],
                              env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(np)]
    try:
        outs = [p.communicate(timeout=DEADLINE_S)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
    for r, (p, out) in enumerate(zip(procs, outs)):
        assert p.returncode == 0 and f"errors rank {r} of {np}" in out, f"rank {r}:\n{out[-4000:]}"
