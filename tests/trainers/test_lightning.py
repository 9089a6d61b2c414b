"""PyTorch Lightning on kolo (python/kolo/lightning.py): a Trainer trains on backend "kolo".

Each job (workers/lightning_train.py) fits a small model on 2 ranks, checkpoints
and runs Trainer.test; workers/lightning_check.py then checks, exactly: the
ranks' identities (Lightning = torch = kolo), bit-identical final weights equal
to a single-process plain-torch reference, sync_dist means, rank 0's
checkpoint, Trainer.test's totals. Started by Lightning's own launcher (one
plain process) and by kolorun (a plain DDPStrategy too: kolorun sets torchrun's
variables); srun is lightning_slurm_test.sh.

  KOLORUN=build/tools/kolorun/kolorun PYTHONPATH=build/python \\
      ~/.cache/kolo/venvs/torch-2.15.0/bin/python -m pytest -q tests/trainers/test_lightning.py
"""
import os
import signal
import subprocess
import sys
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "workers", "lightning_train.py")
sys.path.insert(0, os.path.join(HERE, "workers"))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

import launch  # noqa: E402  (tests/python: KOLORUN, DEADLINE_S)
from lightning_check import check  # noqa: E402

from pytorch_lightning import Trainer  # noqa: E402
from pytorch_lightning.strategies import DDPStrategy, StrategyRegistry  # noqa: E402
from lightning_fabric.plugins.environments import LightningEnvironment, TorchElasticEnvironment  # noqa: E402

from kolo.lightning import KoloDDPStrategy, KoloEnvironment  # noqa: E402

# Variables of an outer job (a CI runner under Slurm or torchrun) would change
# which cluster environment Lightning picks.
_OUTER = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK",
          "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "PL_GLOBAL_SEED")


def _clean_env():
    env = {k: v for k, v in os.environ.items()
           if k not in _OUTER and not k.startswith(("KOLO_", "SLURM_", "TORCHELASTIC_"))}
    env.update(OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
    return env


def _session(sid):
    """Live (not zombie) processes of session sid: the job's launcher and every rank it started."""
    pids = []
    for p in os.listdir("/proc"):
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if p.isdigit() and int(fields[3]) == sid and fields[0] != "Z":
            pids.append(int(p))
    return pids


def run_job(argv):
    """Runs argv in a session of its own; returns (exit code, output) once every process of
    the session has ended (Lightning's launcher does not wait for the ranks it starts).
    Whatever is left at the deadline, or on any failure here, is killed."""
    proc = subprocess.Popen(argv, env=_clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        out = proc.communicate(timeout=launch.DEADLINE_S)[0]
        deadline = time.monotonic() + 60
        while _session(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = _session(proc.pid)
        assert not left, f"processes of the job outlived it: {left}\n{out[-6000:]}"
        return proc.returncode, out
    finally:
        for pid in [proc.pid, *_session(proc.pid)]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait()


def kolorun(np, *args):
    return [launch.KOLORUN, "-np", str(np), "--timeout", str(launch.DEADLINE_S), sys.executable, *args]


# -- the job, started two ways ------------------------------------------------

JOBS = {
    # name: (launcher, worker options, the cluster environment Lightning must use)
    # --strategy kolo is DDPStrategy(process_group_backend="kolo"): under kolorun
    # Lightning detects TorchElasticEnvironment by the torchrun variables kolorun
    # sets, as under torchrun; "ddp_kolo" and --plugin bring KoloEnvironment.
    "lightning-ddp_kolo": ("lightning", ["--strategy", "ddp_kolo"], "LightningEnvironment"),
    "lightning-DDPStrategy": ("lightning", ["--strategy", "kolo"], "LightningEnvironment"),
    "kolorun-ddp_kolo": ("kolorun", ["--strategy", "ddp_kolo"], "KoloEnvironment"),
    "kolorun-DDPStrategy": ("kolorun", ["--strategy", "kolo"], "TorchElasticEnvironment"),
    "kolorun-DDPStrategy-plugin": ("kolorun", ["--strategy", "kolo", "--plugin"], "KoloEnvironment"),
}


@pytest.mark.parametrize("job", list(JOBS))
def test_trains(job):
    how, options, environment = JOBS[job]
    with tempfile.TemporaryDirectory() as out:
        argv = [WORKER, out, *options]
        rc, text = run_job(kolorun(2, *argv) if how == "kolorun" else [sys.executable, *argv])
        assert rc == 0, f"{job} exited {rc}:\n{text[-8000:]}"
        check(out, 2, environment=environment)


def test_other_backend_under_kolorun():
    """KoloEnvironment serves any backend: gloo's store address travels over kolo."""
    with tempfile.TemporaryDirectory() as out:
        rc, text = run_job(kolorun(2, WORKER, out, "--strategy", "gloo", "--plugin"))
        assert rc == 0, f"exited {rc}:\n{text[-8000:]}"
        check(out, 2, environment="KoloEnvironment", backend="gloo")


def test_kolorun_trainer_mismatch_is_an_error():
    """kolorun -np 2 with Trainer(devices=1): every rank stops with an error saying what to pass."""
    with tempfile.TemporaryDirectory() as out:
        rc, text = run_job(kolorun(2, WORKER, out, "--strategy", "ddp_kolo", "--devices", "1"))
        assert rc != 0, text[-4000:]
        for r in (0, 1):
            assert any(line.startswith(f"[{r}] ") and "kolorun started 2 ranks, 2 on this host, but the Trainer "
                       "has devices=1, num_nodes=1; pass devices=2, num_nodes=1" in line
                       for line in text.splitlines()), f"rank {r} did not say so:\n{text[-6000:]}"


def test_kolorun_ddp_spawn_is_an_error_naming_the_fix():
    """Lightning's "ddp_spawn" under kolorun starts workers of its own, two per rank: the job
    fails (never a hang, never one job of mixed ranks) with an error that names the strategy to use."""
    with tempfile.TemporaryDirectory() as out:
        rc, text = run_job(kolorun(2, WORKER, out, "--strategy", "kolo", "--spawn"))
        assert rc != 0, text[-4000:]
        # rank 0's twin cannot bind MASTER_PORT, the other ranks' twins are refused by kolo's rendezvous
        assert ('in Lightning, strategy "ddp" or "ddp_kolo"' in text and
                ("already taken by another process" in text or "cannot listen on MASTER_PORT" in text)), text[-6000:]


# -- in this process: the name, the environment, the settings check ----------

KOLORUN_RANK3_OF_4 = {"KOLO_RANK": "3", "KOLO_SIZE": "4", "KOLO_LOCAL_RANK": "1", "KOLO_LOCAL_SIZE": "2"}


def _without_job_variables(monkeypatch):
    for k in list(os.environ):
        if k in _OUTER or k.startswith(("KOLO_", "SLURM_", "TORCHELASTIC_")):
            monkeypatch.delenv(k)


def test_ddp_kolo_is_registered(monkeypatch):
    _without_job_variables(monkeypatch)
    assert StrategyRegistry["ddp_kolo"]["strategy"] is KoloDDPStrategy
    trainer = Trainer(accelerator="cpu", devices=2, strategy="ddp_kolo", logger=False)
    assert isinstance(trainer.strategy, DDPStrategy) and trainer.strategy.process_group_backend == "kolo"
    # Outside kolorun Lightning's own launcher starts the ranks.
    assert type(trainer.strategy.cluster_environment) is LightningEnvironment
    assert not KoloEnvironment.detect()


@pytest.mark.parametrize("how", ["ddp_kolo", "plugin"])
def test_kolorun_ranks_are_lightnings(monkeypatch, how):
    _without_job_variables(monkeypatch)
    for k, v in KOLORUN_RANK3_OF_4.items():
        monkeypatch.setenv(k, v)
    assert KoloEnvironment.detect()
    if how == "ddp_kolo":
        kwargs = {"strategy": "ddp_kolo"}
    else:
        kwargs = {"strategy": DDPStrategy(process_group_backend="kolo"), "plugins": [KoloEnvironment()]}
    trainer = Trainer(accelerator="cpu", devices=2, num_nodes=2, logger=False, **kwargs)
    assert type(trainer.strategy.cluster_environment) is KoloEnvironment
    assert trainer.strategy.cluster_environment.creates_processes_externally  # Lightning starts none
    assert (trainer.global_rank, trainer.world_size, trainer.local_rank, trainer.node_rank) == (3, 4, 1, 1)
    trainer.strategy.cluster_environment.validate_settings(num_devices=2, num_nodes=2)


def test_plain_ddp_strategy_under_kolorun_is_torchelastic(monkeypatch):
    """What kolorun gives rank 3 of 4 (2 hosts of 2): Lightning's own detection
    finds a launched job and takes its ranks; no plugin, no ddp_kolo."""
    _without_job_variables(monkeypatch)
    for k, v in {**KOLORUN_RANK3_OF_4, "RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1",
                 "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2",
                 "TORCHELASTIC_RUN_ID": "0123456789abcdef", "MASTER_ADDR": "10.0.0.1",
                 "MASTER_PORT": "29517"}.items():
        monkeypatch.setenv(k, v)
    trainer = Trainer(accelerator="cpu", devices=2, num_nodes=2, logger=False,
                      strategy=DDPStrategy(process_group_backend="kolo"))
    env = trainer.strategy.cluster_environment
    assert type(env) is TorchElasticEnvironment and env.creates_processes_externally
    assert (trainer.global_rank, trainer.world_size, trainer.local_rank, trainer.node_rank) == (3, 4, 1, 1)
    assert (env.main_address, env.main_port) == ("10.0.0.1", 29517)


def test_kolo_environment_errors(monkeypatch):
    _without_job_variables(monkeypatch)
    for k, v in KOLORUN_RANK3_OF_4.items():
        monkeypatch.setenv(k, v)
    env = KoloEnvironment()
    with pytest.raises(ValueError, match=r"kolorun started 4 ranks, 2 on this host, but the Trainer has "
                                         r"devices=4, num_nodes=1; pass devices=2, num_nodes=2"):
        env.validate_settings(num_devices=4, num_nodes=1)
    with pytest.raises(ValueError, match=r"devices=2, num_nodes=1; pass devices=2, num_nodes=2"):
        env.validate_settings(num_devices=2, num_nodes=1)
    monkeypatch.delenv("KOLO_LOCAL_RANK")
    with pytest.raises(RuntimeError, match="KOLO_LOCAL_RANK is not set; KoloEnvironment serves processes "
                                           "started by kolorun"):
        env.local_rank()
    monkeypatch.setenv("KOLO_SIZE", "four")
    with pytest.raises(RuntimeError, match="KOLO_SIZE=four is not an integer"):
        env.world_size()
