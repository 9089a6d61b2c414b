"""Every kolo.tensorflow collective, eagerly and in tf.function, per dtype
and op, their gradients, variables and objects, a process set
(workers/collectives_worker.py) on 2 ranks."""
import os

from launch import assert_ok, run

WORKERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "workers")


def test_collectives_eager_and_traced():
    proc = run(2, os.path.join(WORKERS, "collectives_worker.py"))
    assert_ok(proc, 2, "tf")
