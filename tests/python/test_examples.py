"""The Horovod-API example runs end to end on 2 ranks (a smoke run on 2,048
training images; the full epoch's accuracy is checked by hand, see
python/README.md) and rank 0 writes a loadable checkpoint."""
import os
import subprocess
import sys
import tempfile

import pytest
import torch

from launch import DEADLINE_S, HERE, KOLORUN

EXAMPLE = os.path.join(HERE, "..", "..", "examples", "python", "horovod_fashion_mnist.py")
DATA = "/usr/share/datasets/fashion-mnist"


@pytest.mark.skipif(not os.path.exists(DATA), reason="dataset-fashion-mnist is not installed")
def test_horovod_example_smoke():
    with tempfile.TemporaryDirectory() as d:
        ckpt = os.path.join(d, "model.pt")
        proc = subprocess.run([KOLORUN, "-np", "2", "--timeout", str(DEADLINE_S), sys.executable,
                               EXAMPLE, "--limit", "2048", "--checkpoint", ckpt],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=DEADLINE_S + 60)
        out = proc.stdout
        assert proc.returncode == 0, out[-4000:]
        assert "[0] epoch 1/1" in out and "100%" in out, out[-4000:]
        assert "[0] test set: average loss" in out, out[-4000:]
        assert "[1] test set" not in out and "[1] epoch" not in out, "only rank 0 reports"
        state = torch.load(ckpt)
        assert state["epoch"] == 1 and "fc2.weight" in state["model"] and "state" in state["optimizer"]
