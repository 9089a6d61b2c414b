#!/usr/bin/env python3
"""Per-call cost of kolo.tensorflow's allreduce from TensorFlow, 2 ranks, one run.

  1. hvd.allreduce of 2 x f32 (8 B), eagerly and inside a tf.function (one
     allreduce per call), beside the same tf.function without the allreduce
     (TF's own call cost) and the bare binding (kolo._C on a NumPy array):
     medians (and 10th/90th percentiles) over --calls calls.
  2. hvd.allreduce (Sum, a new tensor, as in Horovod's TF API) of 8 B, 1 MiB
     and 64 MiB f32, eagerly, beside kolo-bench's allreduce of the same size.
kolo-bench and the TF side alternate --reps times; medians of the rounds.

  bench/tensorflow/allreduce_cost.py --python ~/.cache/kolo/venvs/tensorflow-2.21.0/bin/python \
      [--build build] [--np 2] [--calls 2000] [--reps 3] [--out FILE]
"""
import os
import re
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "torch"))
from compare import machine  # noqa: E402  (bench/torch/compare.py)
from overhead import arguments, kolo_bench_us, launcher, print_cases, report, timed  # noqa: E402  (bench/python/overhead.py)

SIZES = {"8B": 8, "1MiB": 1 << 20, "64MiB": 64 << 20}


def rank_side(calls):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import numpy as np
    import tensorflow as tf
    import kolo.tensorflow as hvd
    from kolo import _C, basics

    hvd.init()
    tf.config.threading.set_intra_op_parallelism_threads(1)

    small = tf.ones([2])
    arr = np.ones(2, np.float32)
    comm, ptr = basics.comm(), arr.__array_interface__["data"][0]
    traced = tf.function(lambda x: hvd.allreduce(x, op=hvd.Sum))
    plain = tf.function(lambda x: x * 1.0)
    cases = {"eager": lambda: hvd.allreduce(small, op=hvd.Sum),
             "tf.function": lambda: traced(small),
             "tf.function_without_allreduce": lambda: plain(small),
             "binding": lambda: comm.allreduce(ptr, ptr, 2, _C.F32, _C.SUM)}
    for name, fn in cases.items():
        timed(fn, max(50, calls // 10))  # warm-up (and the trace)
    # The cases take turns in 10 blocks, so that the load of a shared machine
    # (the other rank descheduled) falls on all of them alike.
    results = {name: [] for name in cases}
    for _ in range(10):
        for name, fn in cases.items():
            results[name] += timed(fn, max(1, calls // 10))
    for name, size in SIZES.items():
        t = tf.ones([size // 4])
        n = 20 if size > (1 << 20) else 200
        timed(lambda: hvd.allreduce(t, op=hvd.Sum), 3)
        results[f"size_{name}"] = timed(lambda: hvd.allreduce(t, op=hvd.Sum), n)
    if hvd.rank() == 0:
        print_cases(results)


def main():
    ap = arguments(2000)
    ap.add_argument("--python", required=True, help="a Python with tensorflow (scripts/install-tensorflow.sh)")
    ap.add_argument("--machine", default=None, help="how to name the machine in the output")
    a = ap.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS="1", TF_CPP_MIN_LOG_LEVEL="2",
               PYTHONPATH=os.path.abspath(os.path.join(a.build, "python")))
    launch = launcher(a.build, a.np, env)

    rounds = []
    for _ in range(a.reps):
        out = launch([a.python, os.path.abspath(__file__), "--rank-side", str(a.calls)])
        r = {m.group(1): float(m.group(2)) for m in re.finditer(r"^case=(\S+) .*median_us=([\d.]+)", out, re.M)}
        for name, size in SIZES.items():
            r[f"kolo-bench_{name}"] = kolo_bench_us(launch, a.build, size, inplace=False)
        rounds.append(r)
    med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    lines = [f"# kolo.tensorflow allreduce cost, {a.np} ranks, {a.reps} alternating rounds; medians",
             f"# machine: {a.machine or machine()}",
             f"# date: {time.strftime('%Y-%m-%d %H:%M:%S')}, load average: {os.getloadavg()[0]:.2f}",
             f"hvd.allreduce 8 B eager:               {med['eager']:10.2f} us per call (median of {a.calls})",
             f"hvd.allreduce 8 B in tf.function:      {med['tf.function']:10.2f} us per call",
             f"  the same tf.function without it:     {med['tf.function_without_allreduce']:10.2f} us per call",
             f"  so the allreduce inside adds:        {med['tf.function'] - med['tf.function_without_allreduce']:10.2f} us",
             f"binding (kolo._C, NumPy) 8 B:          {med['binding']:10.2f} us per call"]
    for name in SIZES:
        lines.append(f"hvd.allreduce {name:>5} eager / kolo-bench: {med['size_' + name]:10.1f} / "
                     f"{med['kolo-bench_' + name]:10.1f} us")
    lines.append(f"# rounds: {rounds}")
    report(lines, a.out)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--rank-side":
        rank_side(int(sys.argv[2]))
    else:
        main()
