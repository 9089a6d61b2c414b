"""Starts a worker program under kolorun for the pytest suites.

KOLORUN (the launcher) and PYTHONPATH (the built kolo package) come from
ctest (tests/python/CMakeLists.txt); run by hand:
  KOLORUN=build/tools/kolorun/kolorun PYTHONPATH=build/python \
      /usr/bin/python3 -m pytest -q tests/python
"""
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
KOLORUN = os.environ.get("KOLORUN", os.path.join(HERE, "..", "..", "build", "tools", "kolorun",
                                                 "kolorun"))
# Generous: several ranks share 2 loaded cores; the tests never assert on speed.
DEADLINE_S = int(os.environ.get("KOLO_PY_TEST_DEADLINE", "400"))


def run(np, worker, *args, transport=None, grace=None, env=None, shell_prefix=None):
    """Runs worker (a file in workers/) on np ranks; returns the CompletedProcess.

    shell_prefix: shell text run before the worker in each rank (it sees
    KOLO_RANK), e.g. to give each rank its own variables."""
    e = dict(os.environ)
    e.pop("KOLO_TRANSPORT", None)
    if transport:
        e["KOLO_TRANSPORT"] = transport
    e["PYTHONDONTWRITEBYTECODE"] = "1"
    e.update(env or {})
    cmd = [KOLORUN, "-np", str(np), "--timeout", str(DEADLINE_S)]
    if grace:
        cmd += ["--grace-period", str(grace)]
    if shell_prefix:
        cmd += ["/bin/sh", "-c", shell_prefix + ' exec "$0" "$@"']
    cmd += [sys.executable, os.path.join(HERE, "workers", worker), *map(str, args)]
    return subprocess.run(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=DEADLINE_S + 60)


def run_torchrun_style(np, argv, local=False):
    """Starts np processes of argv with torchrun-style variables (RANK,
    WORLD_SIZE, MASTER_ADDR/MASTER_PORT on a free port, no KOLO_*; with
    local, LOCAL_RANK/LOCAL_WORLD_SIZE too); returns [(exit code, output)]."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(np),
               PYTHONDONTWRITEBYTECODE="1")
    for v in [k for k in env if k.startswith("KOLO_")]:
        del env[v]
    if local:
        env["LOCAL_WORLD_SIZE"] = str(np)
    procs = [subprocess.Popen(argv, env=dict(env, RANK=str(r), **({"LOCAL_RANK": str(r)} if local else {})),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(np)]
    try:
        outs = [p.communicate(timeout=DEADLINE_S)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
    return [(p.returncode, out) for p, out in zip(procs, outs)]


def assert_ok(proc, np, marker):
    """Exit 0 and every rank printed '<marker> rank r of np: OK'."""
    out = proc.stdout
    assert proc.returncode == 0, f"kolorun exited {proc.returncode}:\n{out[-6000:]}"
    for r in range(np):
        line = re.compile(rf"^\[{r}\] {marker} rank {r} of {np}\b.*: OK \(\d+ checks\)$", re.M)
        assert line.search(out), f"rank {r} did not finish:\n{out[-6000:]}"


def run_killed_rank(worker, mode, transport, np=3, dead=1):
    """Runs `worker mode DIR` on np ranks, where rank `dead` SIGKILLs itself and
    every other rank writes the kolo error it caught to DIR/rank.R.err (and
    its pid to DIR/rank.R.pid, rank 0 the job id to DIR/job). Asserts kolorun's
    exit 137 naming the dead rank, every survivor's error naming it, no
    segment left in /dev/shm and no process of the job left; returns the
    survivors' error texts by rank."""
    import glob
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        try:
            proc = run(np, worker, mode, d, transport=transport, grace=60)
            out = proc.stdout
            assert proc.returncode == 137, f"kolorun exited {proc.returncode}:\n{out[-4000:]}"
            assert f"rank {dead} was killed by signal 9" in out, out[-4000:]
            texts = {}
            for r in range(np):
                if r == dead:
                    continue
                with open(os.path.join(d, f"rank.{r}.err")) as f:
                    texts[r] = f.read()
                assert f"kolo rank {r}: " in texts[r] and f"rank {dead}" in texts[r], texts[r]
            job = open(os.path.join(d, "job")).read().strip()
            assert not glob.glob(f"/dev/shm/kolo-{job}*"), "shared memory left behind"
            ps = subprocess.run(["ps", "-eo", "pid,args"], stdout=subprocess.PIPE, text=True).stdout
            assert d not in ps, f"processes of the job are left:\n{ps}"
            return texts
        finally:
            for pidfile in glob.glob(os.path.join(d, "rank.*.pid")):
                try:
                    os.kill(int(open(pidfile).read()), 9)
                except (OSError, ValueError):
                    pass
