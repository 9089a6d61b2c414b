"""Programs written for torchrun run unchanged under kolorun, which gives each
rank torchrun's variables (tools/kolorun/torchrun_env.h): torch's gloo through
env:// in a program that never imports kolo, and the "kolo" backend through
the same env:// (torch's store on MASTER_PORT, kolo's communicator from
kolorun's variables)."""
import re

import pytest

from launch import run


@pytest.mark.parametrize("np", [1, 3])
def test_gloo_env_program_without_kolo(np):
    proc = run(np, "torchrun_gloo_worker.py")
    out = proc.stdout
    assert proc.returncode == 0, f"kolorun exited {proc.returncode}:\n{out[-6000:]}"
    for r in range(np):
        line = f"[{r}] torchrun_gloo rank {r} of {np}: local {r}/{np} group 0/1 elastic True: OK"
        assert re.search(rf"^{re.escape(line)}$", out, re.M), f"rank {r} did not finish:\n{out[-6000:]}"


def test_kolo_backend_through_torchs_env_rendezvous():
    """init_process_group("kolo") under kolorun now takes torch's env:// path
    (MASTER_ADDR set): DDP on kolo still runs, on kolorun's ranks."""
    proc = run(2, "process_group_worker.py", "init,ddp")
    out = proc.stdout
    assert proc.returncode == 0, f"kolorun exited {proc.returncode}:\n{out[-6000:]}"
    for r in range(2):
        assert f"[{r}] process_group init: rank {r} of 2 via MASTER_ADDR" in out, out[-6000:]
        assert re.search(rf"^\[{r}\] process_group rank {r} of 2 \[init,ddp\]: OK \(\d+ checks\)$", out, re.M), \
            out[-6000:]
