"""kolo.tensorflow's errors on 2 ranks (workers/errors_worker.py): a
mismatched call raises on every rank, eagerly and in tf.function, and the
communicator stays usable; unsupported dtypes, XLA and bad arguments are
clear errors naming the problem and the rank."""
import os

from launch import assert_ok, run

WORKERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "workers")


def test_errors_on_every_rank():
    proc = run(2, os.path.join(WORKERS, "errors_worker.py"))
    assert_ok(proc, 2, "tf-errors")
