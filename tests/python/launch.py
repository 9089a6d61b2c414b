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


def assert_ok(proc, np, marker):
    """Exit 0 and every rank printed '<marker> rank r of np: OK'."""
    out = proc.stdout
    assert proc.returncode == 0, f"kolorun exited {proc.returncode}:\n{out[-6000:]}"
    for r in range(np):
        line = re.compile(rf"^\[{r}\] {marker} rank {r} of {np}\b.*: OK \(\d+ checks\)$", re.M)
        assert line.search(out), f"rank {r} did not finish:\n{out[-6000:]}"
