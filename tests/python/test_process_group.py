"""The torch.distributed backend "kolo" (workers/process_group_worker.py):
every op against results computed in the worker, DDP on "kolo" equal to DDP
on "gloo", errors with their text on every rank, a rank killed during DDP
training; started by kolorun (which sets torchrun's variables too), by
torchrun-style variables (env:// with MASTER_ADDR/MASTER_PORT) and by mpirun
(no MASTER_* variables: kolo's discovery and env handler)."""
import inspect
import os
import re
import shutil
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist

from launch import DEADLINE_S, HERE, assert_ok, run, run_killed_rank, run_torchrun_style

WORKER = os.path.join(HERE, "workers", "process_group_worker.py")


@pytest.mark.parametrize("np,transport", [(1, None), (2, "shm"), (3, "tcp")])
def test_ops_ddp_and_errors(np, transport):
    assert_ok(run(np, "process_group_worker.py", "ops,ddp,errors", transport=transport), np, "process_group")


@pytest.mark.parametrize("np,transport", [(2, "shm"), (3, "tcp")])
def test_both_op_names_and_object_collectives(np, transport):
    assert_ok(run(np, "process_group_worker.py", "names,objects", transport=transport), np, "process_group")


@pytest.mark.parametrize("np,transport", [(3, "shm"), (4, "tcp")])
def test_new_group_subgroups(np, transport):
    assert_ok(run(np, "process_group_worker.py", "subgroups", transport=transport), np, "process_group")


@pytest.mark.skipif(int(torch.__version__.split(".")[0]) < 2, reason="torch 1.13's groups have no name")
def test_groups_named_without_a_backend_entry():
    """As on torch 2.11, whose Backend has no Python constructor: the groups keep their names."""
    assert_ok(run(2, "process_group_worker.py", "holderless,names,objects,ddp", transport="shm"), 2,
              "process_group")


@pytest.mark.skipif("device_id" not in inspect.signature(dist.init_process_group).parameters,
                    reason=f"torch {torch.__version__}'s init_process_group has no device_id")
def test_device_id():
    proc = run(2, "process_group_worker.py", "device,ops")
    if proc.returncode != 0 and "device_id parameter must be an accelerator with an index" in proc.stdout:
        pytest.skip(f"torch {torch.__version__} refuses a CPU device_id (2.11 does; 2.15 takes one)")
    assert_ok(proc, 2, "process_group")


# torch 1.13 refuses bf16_compress_hook without CUDA ("required CUDA 11+ and NCCL 2.10+").
HOOKS = "fp16_hook,bf16_hook,powersgd" if int(torch.__version__.split(".")[0]) >= 2 else "fp16_hook,powersgd"


@pytest.mark.parametrize("cases,np,transport", [
    ("static,bucket_view,unused,no_sync,join", 2, "shm"),
    (HOOKS, 2, "shm"),
    ("unused,join,powersgd", 3, "tcp"),
])
def test_ddp_options_and_comm_hooks(cases, np, transport):
    assert_ok(run(np, "ddp_options_worker.py", cases, transport=transport), np, "ddp_options")


@pytest.mark.skipif(not hasattr(torch, "compile"), reason=f"torch {torch.__version__} has no torch.compile")
def test_compiled_model_under_ddp():
    assert_ok(run(2, "ddp_options_worker.py", "compile"), 2, "ddp_options")


def assert_every_rank(out, np, modes):
    for r in range(np):
        # mpirun may put two ranks' lines together on one line (and their newlines after both):
        # the line ends, or the next rank's line begins
        assert re.search(rf"process_group rank {r} of {np} \[{modes}\]: OK \(\d+ checks\)(?=$|process_group)",
                         out, re.M), out[-6000:]


def test_env_with_master_addr():
    """torchrun-style variables: torch's store holds MASTER_PORT, kolo's store gets another port."""
    np = 2
    results = run_torchrun_style(np, [sys.executable, "-W", "ignore", WORKER, "init,ddp"])
    for r, (code, out) in enumerate(results):
        assert code == 0, f"rank {r} exited {code}:\n{out[-4000:]}"
        assert f"rank {r} of {np} via MASTER_ADDR" in out, out[-4000:]
    assert_every_rank("".join(out for _, out in results), np, "init,ddp")


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI's mpirun is not installed")
def test_mpirun_without_master_addr():
    np = 2
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KOLO_", "MASTER_"))}
    proc = subprocess.run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(np),
                           sys.executable, "-W", "ignore", WORKER, "init"], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=DEADLINE_S)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert "via kolo discovery" in proc.stdout, proc.stdout[-4000:]
    assert_every_rank(proc.stdout, np, "init")


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_killed_rank_during_ddp(transport):
    run_killed_rank("process_group_worker.py", "kill", transport)


def test_ddp_example_runs():
    """examples/python/ddp_fashion_mnist.py end to end on a slice of the training
    set (its full-epoch accuracy is a manual check, too slow for the suite)."""
    example = os.path.join(HERE, "..", "..", "examples", "python", "ddp_fashion_mnist.py")
    proc = run(2, example, "--limit", "1024")
    out = proc.stdout
    assert proc.returncode == 0, out[-4000:]
    assert "[0] 2 ranks on backend kolo" in out and "100% loss" in out, out[-4000:]
    assert re.search(r"^\[0\] test accuracy \d+\.\d\d%$", out, re.M), out[-4000:]
