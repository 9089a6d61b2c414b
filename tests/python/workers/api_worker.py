"""Every kolo.torch collective against independently computed results, per
dtype, op and size; blocking, async and in place; the gradients of the
differentiable ones against analytic values. Run under kolorun (any -np)."""
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from common import (DTYPES, FLOATS, HALF, check, done, same, tensor, values,  # noqa: E402
                    wrap)

import kolo.torch as hvd  # noqa: E402

hvd.init()
R, N = hvd.rank(), hvd.size()
SIZES = [0, 1, 1001]


def reduce_ref(dtype, op, cols):
    """Python reference of one element: cols = that element on every rank."""
    if dtype == torch.bool:
        return any(cols) if op in ("Sum", "Max") else all(cols)
    if op == "Sum":
        s = sum(cols)
    elif op == "Product":
        s = math.prod(cols)
    elif op == "Min":
        s = min(cols)
    elif op == "Max":
        s = max(cols)
    else:  # Average
        if dtype in FLOATS:
            return sum(cols) / N
        s = abs(sum(cols)) // N * (1 if sum(cols) >= 0 else -1)  # integer average: rounded toward zero, as Horovod
    return s if dtype in FLOATS else wrap(s, dtype)


OPS = {"Sum": hvd.Sum, "Average": hvd.Average, "Min": hvd.Min, "Max": hvd.Max,
       "Product": hvd.Product}


def test_basics():
    check(hvd.is_initialized(), "is_initialized")
    check(R == int(os.environ["KOLO_RANK"]) and N == int(os.environ["KOLO_SIZE"]), "rank/size")
    check(hvd.local_rank() == R and hvd.local_size() == N, "local rank/size on one host")
    check(hvd.cross_rank() == 0 and hvd.cross_size() == 1, "one host: cross_rank 0, cross_size 1")


def test_allreduce():
    for dtype in DTYPES:
        for opname, op in OPS.items():
            if dtype == torch.bool and opname == "Average":
                continue  # an error: errors_worker checks it
            for n in SIZES:
                wide = dtype in (torch.int8, torch.int16) and opname == "Sum"
                ins = [values(r, dtype, n, wide) for r in range(N)]
                want = [reduce_ref(dtype, opname, [ins[r][i] for r in range(N)]) for i in range(n)]
                tol = 1e-2 if dtype in HALF else (1e-6 if dtype in FLOATS and opname == "Average" else None)
                x = tensor(ins[R], dtype)
                keep = x.clone()
                got = hvd.allreduce(x, op=op, name=f"ar.{dtype}.{opname}")
                check(same(got, want, dtype, tol), f"allreduce {dtype} {opname} n={n}: {got[:8]}")
                check(torch.equal(x, keep), f"allreduce left its input alone ({dtype})")
                h = hvd.allreduce_async_(x, op=op)
                check(same(hvd.synchronize(h), want, dtype, tol) and same(x, want, dtype, tol),
                      f"allreduce_async_ {dtype} {opname} n={n}")
    # larger than the one-shot limit, prescale/postscale, the deprecated average flag
    n = 70000
    ins = [values(r, torch.float32, n) for r in range(N)]
    want = [sum(ins[r][i] for r in range(N)) * 0.5 * 3.0 for i in range(n)]
    got = hvd.allreduce(tensor(ins[R], torch.float32), op=hvd.Sum, prescale_factor=0.5,
                        postscale_factor=3.0)
    check(same(got, want, torch.float32, 1e-6), "allreduce f32 70000 with pre/postscale")
    got = hvd.allreduce(tensor(ins[R], torch.float32), average=False)
    check(same(got, [w / 1.5 for w in want], torch.float32, 1e-6), "average=False is Sum")
    y = tensor(ins[R], torch.float64).reshape(7, 10000)
    check(hvd.allreduce_(y, op=hvd.Max) is y and y.shape == (7, 10000), "allreduce_ keeps shape")
    # fp16/bf16 compression of an f32 allreduce
    small = [values(r, torch.float32, 33) for r in range(N)]
    for comp in (hvd.Compression.fp16, hvd.Compression.bf16, hvd.Compression.none):
        got = hvd.allreduce(tensor(small[R], torch.float32), compression=comp)
        check(got.dtype == torch.float32 and same(got, [sum(c) / N for c in zip(*small)],
                                                  torch.float32, 1e-2), f"compression {comp.__name__}")


def test_grouped():
    ins = [[values(r, torch.float32, k + 2) for k in range(3)] for r in range(N)]
    ts = [tensor(v, torch.float32) for v in ins[R]]
    want = [[sum(ins[r][k][i] for r in range(N)) for i in range(k + 2)] for k in range(3)]
    outs = hvd.grouped_allreduce(ts, op=hvd.Sum)
    check(all(same(o, w, torch.float32) for o, w in zip(outs, want)), "grouped_allreduce")
    h = hvd.grouped_allreduce_async(ts, op=hvd.Sum)
    while not hvd.poll(h):
        pass
    outs = hvd.synchronize(h)
    check(all(same(o, w, torch.float32) for o, w in zip(outs, want)), "grouped_allreduce_async")
    hvd.grouped_allreduce_(ts, op=hvd.Sum)
    check(all(same(o, w, torch.float32) for o, w in zip(ts, want)), "grouped_allreduce_")
    outs = hvd.grouped_allgather([torch.full((R + 1,), R), torch.full((1, 2), R)])
    check(outs[0].tolist() == [r for r in range(N) for _ in range(r + 1)] and
          outs[1].tolist() == [[r, r] for r in range(N)], "grouped_allgather")


def test_allgather():
    for dtype in DTYPES:
        rows = [values(r, dtype, (r + 1) * 3) for r in range(N)]  # rank r: r+1 rows of 3
        x = tensor(rows[R], dtype).reshape(R + 1, 3)
        want = [v for r in range(N) for v in rows[r]]
        got = hvd.allgather(x)
        check(got.shape == (N * (N + 1) // 2, 3) and same(got, want, dtype), f"allgather {dtype}")
        got = hvd.synchronize(hvd.allgather_async(x))
        check(same(got, want, dtype), f"allgather_async {dtype}")
    e = hvd.allgather(torch.empty(0 if R == 0 else 2, 4))  # a rank with no rows
    check(e.shape == (2 * (N - 1), 4), f"allgather with an empty rank: {tuple(e.shape)}")


def test_broadcast():
    for dtype in DTYPES:
        for root in range(N):
            ins = [values(r, dtype, 17) for r in range(N)]
            x = tensor(ins[R], dtype)
            got = hvd.broadcast(x, root)
            check(same(got, ins[root], dtype) and same(x, ins[R], dtype), f"broadcast {dtype} root {root}")
            h = hvd.broadcast_async_(x, root)
            check(hvd.synchronize(h) is x and same(x, ins[root], dtype), f"broadcast_async_ {dtype}")
    y = torch.full((2, 3), float(R))
    check(hvd.broadcast_(y, N - 1) is y and y.eq(N - 1).all(), "broadcast_")


def test_alltoall():
    # rank r sends (r + j) % 3 rows of width 2 to rank j
    def splits(r):
        return [(r + j) % 3 for j in range(N)]

    def rows_of(r, dtype):
        return values(r, dtype, 2 * sum(splits(r)))
    for dtype in DTYPES:
        x = tensor(rows_of(R, dtype), dtype).reshape(-1, 2)
        want, want_splits = [], []
        for src in range(N):
            s = splits(src)
            start = 2 * sum(s[:R])
            want += rows_of(src, dtype)[start:start + 2 * s[R]]
            want_splits.append(s[R])
        got, rs = hvd.alltoall(x, splits=splits(R))
        check(same(got, want, dtype) and rs.tolist() == want_splits, f"alltoall splits {dtype}")
        got, rs = hvd.synchronize(hvd.alltoall_async(x, splits=torch.tensor(splits(R))))
        check(same(got, want, dtype), f"alltoall_async {dtype}")
    even = torch.arange(N * 2) + 100 * R
    got = hvd.alltoall(even)
    check(got.tolist() == [100 * src + 2 * R + k for src in range(N) for k in range(2)],
          "alltoall without splits")


def test_reducescatter():
    d0 = 2 * N + 1  # uneven: lower ranks get one more row
    split = [d0 // N + (1 if r < d0 % N else 0) for r in range(N)]
    start = sum(split[:R])
    for dtype in DTYPES:
        for opname in ("Sum", "Max", "Average"):
            if dtype == torch.bool and opname == "Average":
                continue
            ins = [values(r, dtype, d0 * 2) for r in range(N)]
            full = [reduce_ref(dtype, opname, [ins[r][i] for r in range(N)]) for i in range(d0 * 2)]
            want = full[2 * start:2 * (start + split[R])]
            x = tensor(ins[R], dtype).reshape(d0, 2)
            got = hvd.reducescatter(x, op=OPS[opname])
            tol = 1e-2 if dtype in HALF else (1e-6 if dtype in FLOATS else None)
            check(got.shape == (split[R], 2) and same(got, want, dtype, tol),
                  f"reducescatter {dtype} {opname}: {got.tolist()} vs {want}")
    got = hvd.synchronize(hvd.reducescatter_async(torch.ones(N, 3), op=hvd.Sum))
    check(got.tolist() == [[float(N)] * 3], "reducescatter_async")


def test_misc():
    hvd.barrier()
    h = hvd.allreduce_async(torch.ones(3))
    while not hvd.poll(h):
        pass
    check(hvd.synchronize(h).tolist() == [1.0] * 3, "poll then synchronize")
    obj = hvd.broadcast_object({"rank": R, "list": list(range(R + 3))}, root_rank=N - 1)
    check(obj == {"rank": N - 1, "list": list(range(N + 2))}, "broadcast_object")
    check(hvd.allgather_object(("r", R, "x" * R)) == [("r", r, "x" * r) for r in range(N)],
          "allgather_object")
    torch.manual_seed(R)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    mine = torch.cat([v.reshape(-1).double() for v in model.state_dict().values()])
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
    check(torch.equal(mine, torch.cat([v.reshape(-1).double() for v in ref.state_dict().values()])),
          "broadcast_parameters equals rank 0's model")
    opt = torch.optim.SGD(model.parameters(), lr=0.1 * (R + 1), momentum=0.9)
    if R == 0:
        model(torch.ones(2, 4)).sum().backward()
        opt.step()
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    check(opt.param_groups[0]["lr"] == 0.1, "broadcast_optimizer_state: lr")
    buf = opt.state[model[0].weight]["momentum_buffer"]
    check(torch.equal(hvd.broadcast(buf, 0), buf), "broadcast_optimizer_state: momentum equal")
    check(hvd.join() == N - 1, "join with nobody behind returns the highest rank")


def test_gradients():
    w = [float(r + 1) for r in range(N)]  # rank r's loss weight
    sw = sum(w)
    # allreduce: loss_r = w_r * sum(y)
    for op, scale in ((hvd.Sum, 1.0), (hvd.Average, 1.0 / N)):
        x = torch.arange(5, dtype=torch.float64).requires_grad_()
        (hvd.allreduce(x, op=op, prescale_factor=2.0) * w[R]).sum().backward()
        check(torch.allclose(x.grad, torch.full((5,), sw * scale * 2.0, dtype=torch.float64)),
              f"allreduce {op} grad {x.grad}")
    # allgather: loss_r = sum(W_r * y), W_r[k] = (r+1)*(k+1) for row k of the output
    x = torch.zeros(R + 1, 2, requires_grad=True)
    y = hvd.allgather(x)
    W = torch.tensor([[(R + 1) * (k + 1)] * 2 for k in range(y.shape[0])], dtype=torch.float32)
    (W * y).sum().backward()
    first = R * (R + 1) // 2
    # Horovod's backward averages the incoming gradients over ranks (not their sum)
    want = torch.tensor([[sw * (first + k + 1) / N] * 2 for k in range(R + 1)])
    check(torch.allclose(x.grad, want), f"allgather grad {x.grad.tolist()} vs {want.tolist()}")
    # broadcast from root 1 % N: the root collects the mean of every rank's weight
    root = 1 % N
    x = torch.ones(3, requires_grad=True)
    (hvd.broadcast(x, root) * w[R]).sum().backward()
    want = torch.tensor([sw / N if R == root else 0.0] * 3)
    check(torch.allclose(x.grad, want), f"broadcast grad {x.grad} vs {want}")
    # alltoall: rank r sends 1 row of 2 to every rank; loss_r = sum(c_r * y), c_r[p] = (r+1)*(p+1)
    x = torch.zeros(N, 2, requires_grad=True)
    y, _ = hvd.alltoall(x, splits=[1] * N)
    c = torch.tensor([[(R + 1) * (p + 1)] * 2 for p in range(N)], dtype=torch.float32)
    (c * y).sum().backward()
    want = [[(j + 1) * (R + 1)] * 2 for j in range(N)]  # row j lands at position R on rank j
    check(x.grad.tolist() == want, f"alltoall grad {x.grad.tolist()} vs {want}")
    # reducescatter: rows of rank q carry rank q's weight; Horovod's backward
    # multiplies by size for Sum and leaves Average undivided
    d0 = 2 * N + 1
    split = [d0 // N + (1 if r < d0 % N else 0) for r in range(N)]
    for op, scale in ((hvd.Sum, float(N)), (hvd.Average, 1.0)):
        x = torch.zeros(d0, requires_grad=True)
        (hvd.reducescatter(x, op=op) * w[R]).sum().backward()
        want = [w[q] * scale for q in range(N) for _ in range(split[q])]
        check(torch.allclose(x.grad, torch.tensor(want)), f"reducescatter {op} grad {x.grad}")


for test in (test_basics, test_allreduce, test_grouped, test_allgather, test_broadcast,
             test_alltoall, test_reducescatter, test_misc, test_gradients):
    test()
hvd.shutdown()
check(not hvd.is_initialized(), "shutdown")
done(f"api rank {R} of {N} ({os.environ.get('KOLO_TRANSPORT', 'auto')})")
