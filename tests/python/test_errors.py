"""Refused inputs and mismatched calls raise on every rank with their text
(workers/errors_worker.py), on shared memory and TCP; after a mismatch the
communicator remains usable or (where not every rank caught it) is formed
anew with shutdown() and init()."""
import os
import sys

import pytest

from launch import HERE, assert_ok, run, run_torchrun_style


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
    np = 2
    worker = os.path.join(HERE, "workers", "errors_worker.py")
    results = run_torchrun_style(np, [sys.executable, worker, "usable"], local=True)
    for r, (code, out) in enumerate(results):
        assert code == 0 and f"errors rank {r} of {np}" in out, f"rank {r}:\n{out[-4000:]}"


def test_iface_address_is_kolos_interface_choice(monkeypatch):
    """kolo._C.iface_address(): the address KOLO_IFACE picks, which the "kolo"
    backend announces for its store under torch's rendezvous; a name that
    matches nothing is an error listing this host's interfaces."""
    from kolo import _C
    monkeypatch.delenv("KOLO_IFACE", raising=False)
    assert _C.iface_address() == ""
    for setting in ("lo", "127.0.0.0/8"):
        monkeypatch.setenv("KOLO_IFACE", setting)
        assert _C.iface_address() == "127.0.0.1", setting
    monkeypatch.setenv("KOLO_IFACE", "kolo-no-such0")
    with pytest.raises(_C.Error, match=r"KOLO_IFACE=kolo-no-such0: host .* has no interface of that name.*"
                                       r"its interfaces: .*lo 127\.0\.0\.1"):
        _C.iface_address()
