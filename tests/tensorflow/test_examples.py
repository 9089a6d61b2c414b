"""The TensorFlow examples (examples/tensorflow) run on 2 ranks on a slice of
Fashion-MNIST: exit 0, rank 0's accuracy line (and no other rank's), rank
0's checkpoint."""
import os
import re
import tempfile

import pytest
from launch import run

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "tensorflow")
DATA = "/usr/share/datasets/fashion-mnist"


@pytest.mark.skipif(not os.path.isdir(DATA), reason="dataset-fashion-mnist is not installed")
def test_gradient_tape_and_keras_fit():
    with tempfile.TemporaryDirectory() as d:
        proc = run(2, os.path.join(EXAMPLES, "gradient_tape.py"), "--limit", "512",
                   "--checkpoint-dir", os.path.join(d, "tape"))
        assert proc.returncode == 0, proc.stdout[-4000:]
        assert re.search(r"^\[0\] epoch 1: test accuracy \d+\.\d\d%", proc.stdout, re.M), proc.stdout[-4000:]
        assert os.path.exists(os.path.join(d, "tape", "checkpoint")), os.listdir(d)
        proc = run(2, os.path.join(EXAMPLES, "keras_fit.py"), "--limit", "512",
                   "--checkpoint", os.path.join(d, "keras.weights.h5"))
        assert proc.returncode == 0, proc.stdout[-4000:]
        assert re.search(r"^\[0\] test accuracy \d+\.\d\d% after 1 epoch", proc.stdout, re.M), proc.stdout[-4000:]
        assert os.path.exists(os.path.join(d, "keras.weights.h5")), os.listdir(d)
        assert not re.search(r"^\[1\] .*test accuracy", proc.stdout, re.M), "rank 1 printed the result"
