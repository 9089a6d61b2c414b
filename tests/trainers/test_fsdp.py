"""FSDP on backend "kolo" (issue 21): torch.distributed.fsdp's FSDP2
``fully_shard`` and the classic ``FullyShardedDataParallel``, each trained
for several steps under kolorun on 2 ranks, once on "kolo" and once on
"gloo", with the same seeds and data (workers/fsdp_train.py; the cases, the
model and the data in workers/fsdp_cases.py). The test compares the numbers
of the two runs: the loss of every rank at every step (and the clipped
gradient norm), the final full state dict; it checks that each rank holds a
proper shard of every parameter and of its gradient, and which collectives
FSDP issued on kolo. Apart: kolo's group frees a completed collective's
output once the program drops it (workers/fsdp_release.py), as FSDP2's
memory depends on it.

What torch 2.15 does not run on CPU, with gloo as with kolo, so not here:
  FSDP1 sync_module_states=True: "ValueError: The module has CPU parameters or
    buffers when `sync_module_states=True`, which requires them to be on GPU."
  FSDP2 offload_policy=CPUOffloadPolicy(): "RuntimeError: Found no NVIDIA
    driver on your system." (it pins host memory through CUDA)
  FSDP2 set_gradient_divide_factor on gloo: "RuntimeError: Cannot use
    ReduceOp.PREMUL_SUM with Gloo" (kolo runs it: case fsdp2_divide)

Run by hand (the torch 2.15 venv of scripts/install-torch.sh):
  KOLORUN=build/tools/kolorun/kolorun PYTHONPATH=build/python \\
      ~/.cache/kolo/venvs/torch-2.15.0/bin/python -m pytest -q tests/trainers/test_fsdp.py
"""
import os
import signal
import subprocess
import sys
import tempfile

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, os.path.join(HERE, "workers"))
import launch  # noqa: E402  (tests/python/launch.py: kolorun with the suites' deadline)
from fsdp_cases import CASES, STEPS  # noqa: E402

NP = 2
BACKENDS = ("gloo", "kolo")
# An absolute path: launch.run joins it to tests/python/workers, which keeps it as is.
WORKER = os.path.join(HERE, "workers", "fsdp_train.py")
UNITS = 3  # FSDP units with parameters: conv, fc1, fc2 (fsdp_cases.Net)
# On 2 ranks every reduced element is one sum of two addends, the same in any
# order, so the runs agree to the bit (as observed); the tolerance is for a
# different valid summation order (kolo's reduction vs gloo's), which with
# more ranks moves float32 results in the last bits.
RTOL, ATOL = 1e-5, 1e-6


def _leftovers(marker):
    """Pids of processes whose command line names marker (this test's directory)."""
    ps = subprocess.run(["ps", "-eo", "pid=,args="], stdout=subprocess.PIPE, text=True).stdout
    return [int(line.split(None, 1)[0]) for line in ps.splitlines()
            if marker in line and int(line.split(None, 1)[0]) != os.getpid()]


@pytest.fixture(scope="module")
def runs():
    """{backend: {case: [record of rank 0, record of rank 1]}} (fsdp_train.py's records)."""
    with tempfile.TemporaryDirectory(prefix="kolo-fsdp-") as out:
        for backend in BACKENDS:
            left = []
            try:
                proc = launch.run(NP, WORKER, backend, ",".join(CASES), out)
            finally:
                left = _leftovers(out)
                for pid in left:  # ranks of this test only (their argv names out)
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
            assert proc.returncode == 0, \
                f"FSDP training on {backend}: kolorun exited {proc.returncode}:\n{proc.stdout[-6000:]}"
            assert not left, f"processes of the {backend} run were left after kolorun exited: {left}"
        yield {b: {c: [torch.load(os.path.join(out, f"{c}.{b}.rank{r}.pt")) for r in range(NP)]
                   for c in CASES} for b in BACKENDS}


def _clean(name):
    """FSDP1's parameter name without its wrappers' prefixes: the state dict's name."""
    return name.replace("_fsdp_wrapped_module.", "")


def test_each_run_used_the_backend_it_names(runs):
    for backend, cases in runs.items():
        for case, recs in cases.items():
            assert [r["backend"] for r in recs] == [backend] * NP, f"{case}: the {backend} run used another backend"


def _check_fsdp2_shards(case, recs, full):
    for name, dim in recs[0]["shard_dims"].items():
        parts = [r["shards"][name] for r in recs]
        for rank, part in enumerate(parts):
            assert part.shape[dim] < full[name].shape[dim], \
                f"{case}: rank {rank} holds all of {name} {tuple(full[name].shape)} (dim {dim}), not a shard"
            assert recs[rank]["grad_shapes"][name] == (tuple(part.shape), tuple(part.shape)), \
                f"{case}: rank {rank}'s gradient of {name} is not its shard's shape: {recs[rank]['grad_shapes'][name]}"
        assert torch.equal(torch.cat(parts, dim), full[name]), \
            f"{case}: the ranks' shards of {name} in rank order are not the full parameter"
    assert set(recs[0]["shard_dims"]) == set(full), \
        f"{case}: sharded {set(recs[0]['shard_dims'])}, the model has {set(full)}"


def _check_fsdp1_shards(case, recs, full, orig):
    total = sum(t.numel() for t in full.values())
    for rank, r in enumerate(recs):
        held = sum(t.numel() for t in r["shards"].values())
        assert 0 < held < total, f"{case}: rank {rank} holds {held} of the model's {total} elements"
        for name, (grad, param) in r["grad_shapes"].items():
            # use_orig_params=True leaves no gradient where the shard holds none of a parameter
            assert grad == param or (grad is None and orig and param == (0,)), \
                f"{case}: rank {rank}'s gradient of {name} has shape {grad}, its shard {param}"
    if orig:  # each original parameter: its flattened parts on rank 0, 1, ... in order
        for name in recs[0]["shards"]:
            parts = torch.cat([r["shards"][name] for r in recs])
            assert torch.equal(parts, full[_clean(name)].reshape(-1)), \
                f"{case}: the ranks' parts of {name} in rank order are not the full parameter"
    else:  # flat parameters: all ranks' shards hold every element once, plus zero padding
        every = torch.cat([t for r in recs for t in r["shards"].values()])
        padding = every.numel() - total
        want = torch.cat([t.reshape(-1) for t in full.values()] + [torch.zeros(padding)])
        assert 0 <= padding < NP * UNITS and torch.equal(every.sort().values, want.sort().values), \
            f"{case}: the ranks' flat shards are not the model's elements ({every.numel()} for {total})"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", CASES)
def test_parameters_and_gradients_are_sharded(runs, backend, case):
    recs = runs[backend][case]
    full = recs[0]["final"]
    if CASES[case]["api"] == 2:
        _check_fsdp2_shards(case, recs, full)
    else:
        _check_fsdp1_shards(case, recs, full, CASES[case].get("orig", False))


@pytest.mark.parametrize("case", CASES)
def test_fsdp_issued_its_collectives_on_kolo(runs, case):
    """Gradients reduce-scattered and parameters all-gathered by kolo, with the
    reduce op and dtypes FSDP chooses for the case."""
    opts = CASES[case]
    op = "SUM" if opts["api"] == 1 else "PREMUL_SUM" if opts.get("divide") else "AVG"
    gather = "bfloat16" if opts.get("bf16") else "float32"
    for rank, r in enumerate(runs["kolo"][case]):
        ops = r["ops"]
        assert ops.get(f"reduce_scatter/{op}/float32", 0) >= STEPS * UNITS, \
            f"{case}: rank {rank} reduce-scattered {ops} (want >= {STEPS * UNITS} reduce_scatter/{op}/float32)"
        assert ops.get(f"all_gather/{gather}", 0) >= STEPS * UNITS, \
            f"{case}: rank {rank} all-gathered {ops} (want >= {STEPS * UNITS} all_gather/{gather})"
        if opts.get("clip"):
            assert ops.get("allreduce/SUM/float32", 0) >= STEPS, f"{case}: no allreduce of the norm: {ops}"


@pytest.mark.parametrize("case", CASES)
def test_loss_curve_equals_gloo(runs, case):
    kolo, gloo = runs["kolo"][case], runs["gloo"][case]
    for rank in range(NP):
        got, want = torch.tensor(kolo[rank]["losses"]), torch.tensor(gloo[rank]["losses"])
        assert len(got) == STEPS and len(set(want.tolist())) > 1, f"{case}: rank {rank}'s losses {want.tolist()}"
        torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL,
                                   msg=lambda m: f"{case}: rank {rank}'s losses on kolo {got.tolist()} "
                                                 f"vs gloo {want.tolist()}: {m}")
    assert kolo[0]["losses"] != kolo[1]["losses"], f"{case}: both ranks saw the same data"
    if CASES[case].get("clip"):  # the norm: an allreduce of the shards' parts, the same on every rank
        got, want = torch.tensor(kolo[0]["norms"]), torch.tensor(gloo[0]["norms"])
        assert len(want) == STEPS and bool((want > 0.1).all()), \
            f"{case}: clip_grad_norm_(0.1) did not clip at every step: {want}"
        torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL, msg=lambda m: f"{case}: gradient norms: {m}")
        assert kolo[0]["norms"] == kolo[1]["norms"], f"{case}: the ranks' gradient norms differ"


@pytest.mark.parametrize("case", CASES)
def test_final_state_dict_equals_gloo(runs, case):
    kolo, gloo = runs["kolo"][case][0], runs["gloo"][case][0]
    got, want, initial = kolo["final"], gloo["final"], gloo["initial"]
    assert list(got) == list(want) == list(initial), f"{case}: state dict keys {list(got)} vs {list(want)}"
    for name in want:
        assert torch.equal(kolo["initial"][name], initial[name]), f"{case}: the runs started from different {name}"
        assert not torch.equal(want[name], initial[name]), f"{case}: training did not change {name}"
        torch.testing.assert_close(got[name], want[name], rtol=RTOL, atol=ATOL,
                                   msg=lambda m: f"{case}: {name} after training on kolo vs gloo: {m}")


def test_completed_collectives_release_their_outputs():
    """FSDP2 drops each all-gather's full-size output after copying out; the
    kolo group must not keep it alive (workers/fsdp_release.py)."""
    proc = launch.run(NP, os.path.join(HERE, "workers", "fsdp_release.py"))
    out = proc.stdout
    assert proc.returncode == 0, f"kolorun exited {proc.returncode}:\n{out[-6000:]}"
    for r in range(NP):
        assert f"[{r}] fsdp_release rank {r} of {NP}: OK" in out, f"rank {r} did not finish:\n{out[-6000:]}"
