"""Checks what lightning_train.py's ranks wrote against the reference (lightning_model.py).

  lightning_check.py OUT WORLD [--environment NAME] [--backend NAME] [--hosts N]

Raises AssertionError naming the first thing that is wrong; prints one line per
check passed. Used by test_lightning.py and lightning_slurm_test.sh.
"""
import argparse
import glob
import json
import os
import sys

import torch

from lightning_model import EPOCHS, TEST, TRAIN, BATCH, Regression, rank_value, reference


def check(out, world, environment=None, backend="kolo", hosts=1):
    seen = {}
    for r in range(world):
        path = os.path.join(out, f"rank{r}.json")
        assert os.path.exists(path), f"rank {r} wrote no {path} (it did not finish)"
        with open(path) as f:
            seen[r] = json.load(f)
    extra = sorted(set(glob.glob(os.path.join(out, "rank*.json"))) -
                   {os.path.join(out, f"rank{r}.json") for r in range(world)})
    assert not extra, f"more ranks than {world} wrote results: {extra}"
    ok = []

    # Lightning, torch and kolo agree on every rank's identity.
    for r, s in seen.items():
        who = {k: s[k] for k in ("rank", "world", "torch_rank", "torch_world")}
        assert who == {"rank": r, "world": world, "torch_rank": r, "torch_world": world}, f"rank {r}: {who}"
        assert s["backend"] == backend, f"rank {r} trained on backend {s['backend']}, not {backend}"
        if environment:
            assert s["environment"] == environment, f"rank {r}: cluster environment {s['environment']}"
        if backend == "kolo":
            k = s["kolo"]
            assert k and (k["rank"], k["size"], k["local_rank"]) == (r, world, s["local_rank"]), \
                f"rank {r}: kolo's communicator {k} disagrees with Lightning (local rank {s['local_rank']})"
            assert k["cross_size"] == hosts, f"rank {r}: kolo sees {k['cross_size']} hosts, not {hosts}"
            assert s["node_rank"] == r // (world // hosts), f"rank {r}: node rank {s['node_rank']}"
    ok.append(f"{world} ranks: Lightning, torch and kolo agree on rank and size")

    # The same weights on every rank, bit for bit, and those of one process on the global batch.
    weights = {r: torch.load(os.path.join(out, f"rank{r}.pt")) for r in range(world)}
    for r in range(1, world):
        for k, v in weights[0].items():
            assert torch.equal(v, weights[r][k]), f"{k} differs between rank 0 and rank {r}"
    first, ref, ref_test_loss = reference(world)
    assert weights[0].keys() == ref.keys(), f"{sorted(weights[0])} vs {sorted(ref)}"
    for k, v in ref.items():
        assert not torch.equal(v, first[k]), f"{k} did not train"
        torch.testing.assert_close(weights[0][k], v, rtol=1e-5, atol=1e-6, msg=lambda m: f"{k}: {m}")
    ok.append("final weights identical on every rank and equal to the single-process reference")

    # sync_dist: the mean of the ranks' different values, exactly, on every rank.
    mean = sum(rank_value(r) for r in range(world)) / world
    for r, s in seen.items():
        assert s["fitted"]["rank_value"] == mean, \
            f"rank {r}: sync_dist logged {s['fitted']['rank_value']}, the ranks' mean is {mean}"
    ok.append(f"self.log(sync_dist=True): the ranks' mean {mean} on every rank")

    # Rank 0's checkpoint: one file, the last epoch, the final weights; it loads.
    files = sorted(os.listdir(os.path.join(out, "ckpt")))
    assert files == ["final.ckpt"], f"checkpoint directory holds {files}"
    path = os.path.join(out, "ckpt", "final.ckpt")
    ckpt = torch.load(path, weights_only=False)
    steps = EPOCHS * TRAIN // (world * BATCH)
    assert (ckpt["epoch"], ckpt["global_step"]) == (EPOCHS - 1, steps), \
        f"checkpoint at epoch {ckpt['epoch']}, step {ckpt['global_step']}; expected {EPOCHS - 1}, {steps}"
    loaded = Regression.load_from_checkpoint(path).state_dict()
    for k, v in weights[0].items():
        assert torch.equal(loaded[k], v), f"{k} in the checkpoint differs from the final weights"
    ok.append(f"rank 0's checkpoint (epoch {EPOCHS - 1}, step {steps}) loads with the final weights")

    # Trainer.test: every rank reports the whole test set's results.
    for r, s in seen.items():
        (t,) = s["tested"]
        assert t == seen[0]["tested"][0], f"rank {r}'s test results {t} differ from rank 0's"
        assert t["test_count"] == TEST, f"rank {r}: test_count {t['test_count']}, the test set has {TEST}"
        assert abs(t["test_loss"] - ref_test_loss) <= 1e-5 * ref_test_loss, \
            f"rank {r}: test_loss {t['test_loss']}, the reference's {ref_test_loss}"
    ok.append(f"Trainer.test: {TEST} samples over all ranks, loss {ref_test_loss:.6f} as the reference")
    return ok


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("world", type=int)
    p.add_argument("--environment")
    p.add_argument("--backend", default="kolo")
    p.add_argument("--hosts", type=int, default=1)
    a = p.parse_args()
    for line in check(a.out, a.world, a.environment, a.backend, a.hosts):
        print("ok  ", line)


if __name__ == "__main__":
    sys.exit(main())
