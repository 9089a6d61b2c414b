"""Every kolo.tensorflow collective against independently computed results,
eagerly and inside tf.function, per dtype and op; the gradients of the
differentiable ones against analytic values. Run under kolorun (any -np)."""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from tfcommon import (DTYPES, FLOATS, check, done, same, tensor, values, wrap)  # noqa: E402

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import kolo.tensorflow as hvd  # noqa: E402

hvd.init()
R, N = hvd.rank(), hvd.size()
OPS = {"Sum": hvd.Sum, "Average": hvd.Average, "Min": hvd.Min, "Max": hvd.Max,
       "Product": hvd.Product}
MODES = ("eager", "graph")


def in_mode(mode, fn, *args):
    """fn(*args) eagerly, or traced into a tf.function (a new one each call)."""
    return fn(*args) if mode == "eager" else tf.function(fn)(*args)


def reduce_ref(dtype, op, cols):
    if dtype == tf.bool:
        return any(cols) if op in ("Sum", "Max") else all(cols)
    s = {"Sum": sum, "Product": math.prod, "Min": min, "Max": max}.get(op)
    if s is None:  # Average
        if dtype in FLOATS:
            return sum(cols) / N
        return wrap(sum(cols) // N, dtype)
    return s(cols) if dtype in FLOATS else wrap(s(cols), dtype)


def test_basics():
    check(hvd.is_initialized(), "is_initialized")
    check(R == int(os.environ["KOLO_RANK"]) and N == int(os.environ["KOLO_SIZE"]), "rank/size")
    check(hvd.local_rank() == R and hvd.local_size() == N, "local rank/size on one host")
    check(hvd.cross_rank() == 0 and hvd.cross_size() == 1, "cross rank/size on one host")
    check(int(hvd.rank_op()) == R and int(hvd.size_op()) == N, "rank_op/size_op")


def test_allreduce():
    n = 37
    for dtype in DTYPES:
        every = [values(r, dtype, n) for r in range(N)]
        for name, op in OPS.items():
            if dtype == tf.bool and name == "Average":
                continue
            want = [reduce_ref(dtype, name, [every[r][i] for r in range(N)]) for i in range(n)]
            tol = 1e-2 if dtype in (tf.float16, tf.bfloat16) else (1e-6 if dtype in FLOATS else None)
            # Every op eagerly; in a graph Sum for every dtype and every op for two.
            modes = MODES if name == "Sum" or dtype in (tf.float32, tf.int32) else ("eager",)
            for mode in modes:
                got = in_mode(mode, lambda x: hvd.allreduce(x, op=op), tensor(every[R], dtype))
                check(same(got, want, dtype, tol), f"allreduce {dtype.name} {name} {mode}: "
                      f"{np.asarray(got)[:5]} vs {want[:5]}")
    x = tensor(values(R, tf.float32, 5), tf.float32)
    want = [sum(values(r, tf.float32, 5)[i] for r in range(N)) * 0.5 * 3.0 for i in range(5)]
    for mode in MODES:
        got = in_mode(mode, lambda x: hvd.allreduce(x, op=hvd.Sum, prescale_factor=0.5,
                                                    postscale_factor=3.0), x)
        check(same(got, want, tf.float32, 1e-6), f"allreduce pre/postscale {mode}")
        got = in_mode(mode, lambda x: hvd.allreduce(x, compression=hvd.Compression.fp16), x)
        check(same(got, [w / 1.5 / N for w in want], tf.float32, 1e-3), f"allreduce fp16 {mode}")
    # shapes are kept; a scalar and an empty tensor
    m = tf.reshape(tf.range(6, dtype=tf.float64), [2, 3]) * (R + 1)
    got = hvd.allreduce(m, op=hvd.Sum)
    check(got.shape == (2, 3) and same(got, [i * N * (N + 1) / 2 for i in range(6)], tf.float64),
          "allreduce 2x3")
    check(same(hvd.allreduce(tf.constant(float(R)), op=hvd.Max), [float(N - 1)], tf.float32),
          "allreduce scalar")
    check(hvd.allreduce(tf.zeros([0, 4])).shape == (0, 4), "allreduce empty")
    # grouped: one call, several dtypes
    got = hvd.grouped_allreduce([tf.ones([3]) * R, tf.constant([R, 1], tf.int64)], op=hvd.Sum)
    check(same(got[0], [N * (N - 1) / 2] * 3, tf.float32) and same(got[1], [N * (N - 1) // 2, N],
                                                                    tf.int64), "grouped_allreduce")


def test_sparse_allreduce():
    s = tf.IndexedSlices(tf.constant([[1.0, 2.0]]) * (R + 1), tf.constant([R]), tf.constant([N, 2]))
    got = hvd.allreduce(s)  # Horovod: allgather of values and indices, Average divides the values
    check(isinstance(got, tf.IndexedSlices), "IndexedSlices stays IndexedSlices")
    check(same(got.indices, list(range(N)), tf.int32), "sparse indices")
    check(same(got.values, [v * (r + 1) / N for r in range(N) for v in (1.0, 2.0)], tf.float32,
               1e-6), "sparse values averaged")
    dense = tf.convert_to_tensor(hvd.allreduce(s, op=hvd.Sum))
    check(same(dense, [v * (r + 1) for r in range(N) for v in (1.0, 2.0)], tf.float32),
          "sparse Sum to dense")


def test_allgather_broadcast_alltoall_reducescatter():
    for dtype in DTYPES:
        for mode in MODES if dtype in (tf.float32, tf.bool, tf.int8) else ("eager",):
            # allgather: rank r contributes r+1 rows of 2
            mine = tf.reshape(tensor(values(R, dtype, 2 * (R + 1)), dtype), [R + 1, 2])
            got = in_mode(mode, hvd.allgather, mine)
            want = [v for r in range(N) for v in values(r, dtype, 2 * (r + 1))]
            check(got.shape[1] == 2 and same(got, want, dtype), f"allgather {dtype.name} {mode}")
            for root in range(N):
                got = in_mode(mode, lambda x: hvd.broadcast(x, root), tensor(values(R, dtype, 9),
                                                                             dtype))
                check(same(got, values(root, dtype, 9), dtype), f"broadcast {dtype.name} root {root}")
            # alltoall, equal splits: rank r sends block j of 3 rows to rank j
            x = tensor(values(R, dtype, 3 * N), dtype)
            got = in_mode(mode, hvd.alltoall, x)
            want = [values(r, dtype, 3 * N)[3 * R + i] for r in range(N) for i in range(3)]
            check(same(got, want, dtype), f"alltoall {dtype.name} {mode}")
    # alltoall with uneven splits: rank r sends j+1 rows to rank j
    rows = sum(j + 1 for j in range(N))
    x = tf.reshape(tf.range(rows * 2, dtype=tf.float32) + 100 * R, [rows, 2])
    for mode in MODES:
        out, received = in_mode(mode, lambda x: hvd.alltoall(x, splits=[j + 1 for j in range(N)]), x)
        start = sum(j + 1 for j in range(R))
        want = [float(100 * r + 2 * start + k) for r in range(N) for k in range(2 * (R + 1))]
        check(same(out, want, tf.float32) and same(received, [R + 1] * N, tf.int32),
              f"alltoall splits {mode}")
    # reducescatter: N+1 rows, lower ranks get the remainder
    d0 = N + 1
    every = [values(r, tf.float32, d0 * 2) for r in range(N)]
    summed = [sum(e[i] for e in every) for i in range(d0 * 2)]
    split = [d0 // N + (1 if r < d0 % N else 0) for r in range(N)]
    lo = sum(split[:R])
    for mode in MODES:
        got = in_mode(mode, lambda x: hvd.reducescatter(x, op=hvd.Sum),
                      tf.reshape(tensor(every[R], tf.float32), [d0, 2]))
        check(got.shape[0] == split[R] and same(got, summed[2 * lo:2 * (lo + split[R])], tf.float32),
              f"reducescatter {mode}")
        got = in_mode(mode, lambda x: hvd.reducescatter(x), tf.reshape(tensor(every[R], tf.float32),
                                                                         [d0, 2]))
        check(same(got, [v / N for v in summed[2 * lo:2 * (lo + split[R])]], tf.float32, 1e-6),
              f"reducescatter Average {mode}")


def grad_of(mode, fn, x):
    def g(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = fn(x)
        return tape.gradient(y, x)
    return in_mode(mode, g, x)


def test_gradients():
    """Horovod's gradients (kolo/tensorflow/collectives.py's table), with
    per-rank weights w_r so that a wrong reduction shows."""
    x = tf.constant([1.0, 2.0, 3.0]) * (R + 1)
    w = tf.constant([1.0, 10.0, 100.0]) * (R + 1)
    mean_w = [sum(v * (r + 1) for r in range(N)) / N for v in (1.0, 10.0, 100.0)]
    for mode in MODES:
        g = grad_of(mode, lambda x: tf.reduce_sum(hvd.allreduce(x, op=hvd.Sum) * w), x)
        check(same(g, [m * N for m in mean_w], tf.float32, 1e-5), f"allreduce Sum grad {mode}")
        g = grad_of(mode, lambda x: tf.reduce_sum(hvd.allreduce(x) * w), x)
        check(same(g, mean_w, tf.float32, 1e-5), f"allreduce Average grad {mode}")
        g = grad_of(mode, lambda x: tf.reduce_sum(
            hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5) * w), x)
        check(same(g, [m * N for m in mean_w], tf.float32, 1e-5), f"allreduce scaled grad {mode}")
        # allgather: weights over the gathered rows, then this rank's rows of their average
        ww = tf.range(3 * N, dtype=tf.float32) * (R + 1)
        g = grad_of(mode, lambda x: tf.reduce_sum(hvd.allgather(x) * ww), x)
        avg = [sum(i * (r + 1) for r in range(N)) / N for i in range(3 * N)]
        check(same(g, avg[3 * R:3 * R + 3], tf.float32, 1e-5), f"allgather grad {mode}")
        g = grad_of(mode, lambda x: tf.reduce_sum(hvd.broadcast(x, 0) * w), x)
        check(same(g, mean_w if R == 0 else [0.0] * 3, tf.float32, 1e-5), f"broadcast grad {mode}")
        # alltoall: rank r's block j went to rank j, whose weights come back
        xa = tf.ones([2 * N]) * (R + 1)
        wa = tf.range(2 * N, dtype=tf.float32) + 10 * R
        g = grad_of(mode, lambda x: tf.reduce_sum(hvd.alltoall(x) * wa), xa)
        want = [float(2 * R + (k % 2) + 10 * (k // 2)) for k in range(2 * N)]
        check(same(g, want, tf.float32), f"alltoall grad {mode}")
        # reducescatter Sum: allgather of the rows' weights, times size
        xr = tf.ones([N, 2])
        wr = tf.constant([1.0, 2.0]) * (R + 1)
        g = grad_of(mode, lambda x: tf.reduce_sum(hvd.reducescatter(x, op=hvd.Sum) * wr), xr)
        check(same(g, [v * (r + 1) * N for r in range(N) for v in (1.0, 2.0)], tf.float32),
              f"reducescatter grad {mode}")
        g = grad_of(mode, lambda xs: tf.reduce_sum(hvd.grouped_allreduce([xs, xs * 2])[1] * w), x)
        check(same(g, [2 * m for m in mean_w], tf.float32, 1e-5), f"grouped_allreduce grad {mode}")
    try:
        grad_of("eager", lambda x: tf.reduce_sum(hvd.allreduce(x, op=hvd.Max)), x)
        check(False, "Max has no gradient")
    except RuntimeError as e:
        check("has no gradient" in str(e) and f"kolo rank {R}" in str(e), f"Max grad error: {e}")


def test_variables_and_objects():
    v = [tf.Variable(tf.ones([2, 2]) * R), tf.Variable(tf.constant([R, R + 1], tf.int32)),
         tf.Variable(tf.fill([3], tf.constant(float(R), tf.float64)))]
    hvd.broadcast_variables(v, root_rank=N - 1)
    check(same(v[0], [float(N - 1)] * 4, tf.float32) and same(v[1], [N - 1, N], tf.int32) and
          same(v[2], [float(N - 1)] * 3, tf.float64), "broadcast_variables eager")
    w = tf.Variable(tf.ones([3]) * (R + 5))
    tf.function(lambda: hvd.broadcast_variables([w], root_rank=0))()
    check(same(w, [5.0] * 3, tf.float32), "broadcast_variables in tf.function")
    w.assign(tf.ones([3]) * (R + 5))
    hvd.broadcast_([w], root_rank=N - 1)
    check(same(w, [float(N + 4)] * 3, tf.float32), "broadcast_")
    check(hvd.broadcast_object({"rank": R, "list": [R] * 3}, root_rank=N - 1) ==
          {"rank": N - 1, "list": [N - 1] * 3}, "broadcast_object")
    check(hvd.allgather_object(("r", R)) == [("r", r) for r in range(N)], "allgather_object")
    hvd.barrier()
    tf.function(hvd.barrier)()


def test_tf1_graph():
    """A TF1 graph run by a session: independent kolo ops of different sizes,
    half of them named, fetched together (TF would run them at once and in
    any order; kolo runs them in creation order), and
    broadcast_global_variables as an op."""
    g = tf.Graph()
    with g.as_default():
        outs = [hvd.allreduce(tf.constant(np.full(3 + i, float(R + i), np.float32)), op=hvd.Sum,
                              name=f"sum{i}" if i % 2 else None) for i in range(8)]
        v = tf.compat.v1.get_variable("v", initializer=tf.constant([float(R)] * 2))
        bcast = hvd.broadcast_global_variables(N - 1)
        with tf.compat.v1.Session(graph=g) as sess:
            got = sess.run(outs[::-1])[::-1]
            sess.run(tf.compat.v1.global_variables_initializer())
            sess.run(bcast)
            value = sess.run(v)
    for i, o in enumerate(got):
        check(o.tolist() == [float(sum(r + i for r in range(N)))] * (3 + i), f"TF1 graph allreduce {i}")
    check(value.tolist() == [float(N - 1)] * 2, "broadcast_global_variables in a session")


def test_process_set():
    if N < 2:
        return
    odd = hvd.add_process_set([r for r in range(N) if r % 2 == 1])
    if R % 2 == 1:
        for mode in MODES:
            got = in_mode(mode, lambda x: hvd.allreduce(x, op=hvd.Sum, process_set=odd),
                          tf.constant([float(R)]))
            check(same(got, [float(sum(r for r in range(N) if r % 2))], tf.float32),
                  f"allreduce on a process set {mode}")
            got = in_mode(mode, lambda x: hvd.broadcast(x, 1, process_set=odd), tf.constant([R]))
            check(same(got, [1], tf.int32), f"broadcast on a process set (global root) {mode}")
    else:
        try:
            hvd.allreduce(tf.constant([1.0]), process_set=odd)
            check(False, "non-member allreduce")
        except ValueError as e:
            check("not a member" in str(e), f"non-member error: {e}")
    hvd.remove_process_set(odd)


test_basics()
test_allreduce()
test_sparse_allreduce()
test_allgather_broadcast_alltoall_reducescatter()
test_gradients()
test_variables_and_objects()
test_tf1_graph()
test_process_set()
hvd.shutdown()
done(f"tf rank {R} of {N}")
