"""KOLO_PORT_RANGE holds for the ports kolo's Python fronts choose, on an
emulated host whose firewall admits new TCP connections only to the range.

The host is a network namespace of its own (only loopback) with an nftables
rule that drops every connection to a port outside the range, as a cluster's
firewall would. In it:
  - the "kolo" backend started by a plain torchrun-style launcher (MASTER_PORT
    in the range): rank 0 starts kolo's store on a port kolo chooses;
  - the "kolo" backend in one plain process without MASTER_ADDR/MASTER_PORT
    (what mpirun and srun jobs do): rank 0 starts torch's TCPStore on a port
    kolo chooses;
  - Lightning's "ddp_kolo" under kolorun: rank 0 serves Lightning's main
    address (torch's TCPStore) on a port kolo chooses.
Those ports used to be any free port (Python's bind to port 0), which such a
firewall drops: the jobs hung until killed. A first test checks that the
firewall does drop a connection outside the range (so the others can fail).
Needs root, unshare and nft (Debian's nftables); skipped without them.
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "workers"))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

import launch  # noqa: E402  (tests/python: KOLORUN)
from lightning_check import check  # noqa: E402

LO, HI = 24100, 24139
DEADLINE_S = 240  # the jobs take seconds; a port outside the range hangs until this
RULES = f"""table inet kolo_port_range_test {{
  chain input {{
    type filter hook input priority 0; policy accept;
    ct state established,related accept
    tcp dport != {LO}-{HI} drop
  }}
}}
"""

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("nft"),
    reason="needs root, unshare and nft (Debian's nftables) for the firewalled emulated host")


def firewalled(argv, env=None):
    """Runs argv (and what it starts) on the firewalled host; returns (exit code, output)."""
    setup = 'ip link set lo up && printf "%s" "$RULES" | nft -f - && exec "$@"'
    e = {k: v for k, v in os.environ.items() if not k.startswith(("KOLO_", "MASTER_", "TORCHELASTIC_"))
         and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")}
    e.update(env or {}, RULES=RULES, KOLO_PORT_RANGE=f"{LO}-{HI}", OMP_NUM_THREADS="1",
             PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.Popen(["unshare", "--net", "sh", "-c", setup, "sh", *argv], env=e,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out = proc.communicate(timeout=DEADLINE_S)[0]
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out = proc.communicate()[0]
        pytest.fail(f"timed out after {DEADLINE_S} s (a port outside {LO}-{HI}?):\n{out[-6000:]}")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # whatever the job left behind
        except ProcessLookupError:
            pass
    return proc.returncode, out


def python(code):
    return [sys.executable, "-c", code]


def test_the_firewall_drops_other_ports():
    """A server outside the range cannot be reached, one inside can."""
    code = f"""
import socket
for port, reachable in ((0, False), ({LO}, True)):
    srv = socket.create_server(("127.0.0.1", port))
    try:
        socket.create_connection(srv.getsockname(), timeout=2).close()
        got = True
    except OSError:
        got = False
    assert got == reachable, (srv.getsockname(), got)
print("firewall OK")
"""
    rc, out = firewalled(python(code))
    assert rc == 0 and "firewall OK" in out, out[-4000:]


RANK_CODE = """
import torch, torch.distributed as dist
import kolo.torch  # registers the backend
dist.init_process_group("kolo")
t = torch.ones(1) * (dist.get_rank() + 1)
dist.all_reduce(t)
n = dist.get_world_size()
assert t.item() == n * (n + 1) / 2, t
print(f"rank {dist.get_rank()} of {n}: port range OK", flush=True)
dist.destroy_process_group()
"""


def test_kolo_backend_torchrun_style():
    """Two plain processes with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT (in the
    range): torch's store on MASTER_PORT, kolo's store on a port kolo picks."""
    one = f'WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT={LO} "$0" -c "$1" &'
    start = f'RANK=0 {one} a=$!; RANK=1 {one} b=$!; wait $a; ra=$?; wait $b; [ $? -eq 0 ] && [ $ra -eq 0 ]'

    rc, out = firewalled(["sh", "-c", start, sys.executable, RANK_CODE])
    assert rc == 0, out[-6000:]
    for r in (0, 1):
        assert f"rank {r} of 2: port range OK" in out, out[-6000:]


def test_kolo_backend_without_master_address():
    """One plain process, env:// without MASTER_ADDR/MASTER_PORT: kolo finds
    the job and rank 0 starts torch's TCPStore on a port kolo picks."""
    rc, out = firewalled(python(RANK_CODE))
    assert rc == 0 and "rank 0 of 1: port range OK" in out, out[-6000:]


def test_lightning_ddp_kolo_under_kolorun():
    """Lightning's main address (torch's TCPStore, served by rank 0) on a port
    kolo picks; kolorun's store and MASTER_PORT are kolo's C++ (in the range too)."""
    with tempfile.TemporaryDirectory() as out:
        rc, text = firewalled([launch.KOLORUN, "-np", "2", "--timeout", str(DEADLINE_S - 30),
                               sys.executable, os.path.join(HERE, "workers", "lightning_train.py"), out,
                               "--strategy", "ddp_kolo"])
        assert rc == 0, text[-8000:]
        check(out, 2, environment="KoloEnvironment")
