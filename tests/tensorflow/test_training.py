"""Training with kolo.tensorflow on 2 ranks equals a single-process run over
the concatenated batch (workers/training_worker.py): DistributedGradientTape
eager and traced, fp16 compression, the tf.compat.v1 DistributedOptimizer,
Keras 3 model.fit with DistributedOptimizer and the callbacks, join()."""
import os

from launch import assert_ok, run

WORKERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "workers")


def test_training_matches_one_process():
    proc = run(2, os.path.join(WORKERS, "training_worker.py"))
    assert_ok(proc, 2, "tf-training")
