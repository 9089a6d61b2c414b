"""Horovod's process sets on kolo, 5 ranks: sets {0, 2} and {1, 3} given to
init() work at the same time (every collective, exact results computed here
from ranks alone), rank 4 is in neither and gets Horovod's error when it
calls one; a set added and removed after init; a DistributedOptimizer and a
differentiable allreduce on each set; a mismatch inside {1, 3} is an error
there that names set and world ranks, and the world goes on."""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from common import check, done, values  # noqa: E402

import kolo.torch as hvd  # noqa: E402

EVEN, ODD = hvd.ProcessSet([2, 0]), hvd.ProcessSet([3, 1])
hvd.init(process_sets=[EVEN, ODD])
R, N = hvd.rank(), hvd.size()
check(N == 5, "needs 5 ranks")
MINE = EVEN if R in (0, 2) else ODD if R in (1, 3) else None


def raises(kind, fragments, fn, what):
    try:
        fn()
    except kind as e:
        check(all(f in str(e) for f in fragments), f"{what}: text {str(e)!r} lacks {fragments}")
        return
    except Exception as e:  # noqa: BLE001
        check(False, f"{what}: raised {type(e).__name__}: {e}")
    check(False, f"{what}: did not raise")


def vals(r, n=6):
    return torch.tensor(values(r, torch.float64, n), dtype=torch.float64)


def properties():
    check(EVEN.ranks == [0, 2] and ODD.ranks == [1, 3], f"ranks {EVEN.ranks} {ODD.ranks}")
    check(hvd.global_process_set.process_set_id == 0 and hvd.global_process_set.ranks == list(range(N)),
          f"global set {hvd.global_process_set}")
    check(EVEN.process_set_id not in (None, 0) and ODD.process_set_id not in (None, 0, EVEN.process_set_id),
          f"ids {EVEN.process_set_id} {ODD.process_set_id}")
    for ps in (EVEN, ODD):
        check(ps.size() == 2, f"{ps} size {ps.size()}")
        check(ps.included() == (R in ps.ranks), f"{ps} included()")
        check(ps.rank() == (ps.ranks.index(R) if R in ps.ranks else -1), f"{ps} rank() {ps.rank()}")
    check(hvd.ProcessSet([1]).size() is None, "an unregistered set has no size")


def collectives(ps):
    """Every collective on ps; the other set runs its own at the same time."""
    members = ps.ranks
    me = members.index(R)
    mine = vals(R)
    total = sum(vals(q) for q in members)
    check(torch.equal(hvd.allreduce(mine, op=hvd.Sum, process_set=ps), total), "allreduce sum")
    check(torch.equal(hvd.allreduce(mine, process_set=ps), total / 2), "allreduce average")
    t = mine.clone()
    hvd.allreduce_(t, op=hvd.Sum, process_set=ps)
    check(torch.equal(t, total), "allreduce_")
    h = hvd.allreduce_async(mine, op=hvd.Max, process_set=ps)
    check(torch.equal(hvd.synchronize(h), torch.max(vals(members[0]), vals(members[1]))), "allreduce_async max")
    t = mine.clone()
    check(torch.equal(hvd.synchronize(hvd.allreduce_async_(t, op=hvd.Sum, process_set=ps)), total) and
          torch.equal(t, total), "allreduce_async_")
    sparse = torch.sparse_coo_tensor([[R % 3, 4]], [float(R), 1.0], (6,))
    got = hvd.sparse_allreduce_async(sparse, "sparse", hvd.Average, process_set=ps)().to_dense()
    want = sum(torch.sparse_coo_tensor([[q % 3, 4]], [float(q), 1.0], (6,)).to_dense() for q in members) / 2
    check(torch.equal(got, want), f"sparse_allreduce_async average {got.tolist()}")
    outs = hvd.grouped_allreduce([mine, 2 * mine], op=hvd.Sum, process_set=ps)
    check(torch.equal(outs[0], total) and torch.equal(outs[1], 2 * total), "grouped_allreduce")
    outs = hvd.synchronize(hvd.grouped_allreduce_async([mine], op=hvd.Sum, process_set=ps))
    check(torch.equal(outs[0], total), "grouped_allreduce_async")
    ts = [mine.clone()]
    hvd.grouped_allreduce_(ts, op=hvd.Sum, process_set=ps)
    check(torch.equal(ts[0], total), "grouped_allreduce_")

    rows = vals(R, 3 * (R + 1)).reshape(R + 1, 3)  # first dimensions differ
    want = torch.cat([vals(q, 3 * (q + 1)).reshape(q + 1, 3) for q in members])
    check(torch.equal(hvd.allgather(rows, process_set=ps), want), "allgather")
    check(torch.equal(hvd.synchronize(hvd.allgather_async(rows, process_set=ps)), want), "allgather_async")

    root = members[-1]  # a global rank, as in Horovod
    check(torch.equal(hvd.broadcast(mine, root, process_set=ps), vals(root)), "broadcast")
    t = mine.clone()
    hvd.broadcast_(t, root, process_set=ps)
    check(torch.equal(t, vals(root)), "broadcast_")
    t = mine.clone()
    hvd.synchronize(hvd.broadcast_async_(t, root, process_set=ps))
    check(torch.equal(t, vals(root)), "broadcast_async_")
    raises(ValueError, ["root_rank 4 is not a member of the process set"],
           lambda: hvd.broadcast(mine, 4, process_set=ps), "broadcast from outside the set")

    sent = torch.tensor([[100 * R + j] for j in range(2)], dtype=torch.int64)
    got = hvd.alltoall(sent, process_set=ps)
    check(got.reshape(-1).tolist() == [100 * q + me for q in members], f"alltoall {got.tolist()}")
    block = torch.stack([vals(q, 4) for q in range(2)])  # 2 rows: one per set rank
    got = hvd.reducescatter(block * (R + 1), op=hvd.Sum, process_set=ps)
    check(torch.equal(got, block[me:me + 1] * sum(q + 1 for q in members)), "reducescatter")

    check(hvd.broadcast_object({"from": R}, root_rank=root, process_set=ps) == {"from": root}, "broadcast_object")
    check(hvd.allgather_object(R * 10, process_set=ps) == [q * 10 for q in members], "allgather_object")
    hvd.barrier(process_set=ps)

    # Differentiable, its backward on the set: d(sum(allreduce(x, Sum)))/dx = set size.
    x = mine.clone().requires_grad_()
    hvd.allreduce(x, op=hvd.Sum, process_set=ps).sum().backward()
    check(torch.equal(x.grad, torch.full_like(mine, 2.0)), f"allreduce gradient {x.grad}")


def optimizer(ps):
    """DistributedOptimizer on the set: its gradients are the set's average."""
    torch.manual_seed(R)
    model = torch.nn.Linear(4, 1)
    root = ps.ranks[0]
    hvd.broadcast_parameters(model.state_dict(), root_rank=root, process_set=ps)
    torch.manual_seed(root)
    ref = torch.nn.Linear(4, 1)
    check(torch.equal(model.weight, ref.weight) and torch.equal(model.bias, ref.bias), "broadcast_parameters")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    hvd.broadcast_optimizer_state(opt, root_rank=root, process_set=ps)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(), process_set=ps)

    def grads(r):
        m = torch.nn.Linear(4, 1)
        m.load_state_dict(ref.state_dict())
        x = torch.arange(8, dtype=torch.float32).reshape(2, 4) * (r + 1)
        m(x).pow(2).sum().backward()
        return m.weight.grad, m.bias.grad
    want_w = sum(grads(q)[0] for q in ps.ranks) / 2
    want_b = sum(grads(q)[1] for q in ps.ranks) / 2
    x = torch.arange(8, dtype=torch.float32).reshape(2, 4) * (R + 1)
    model(x).pow(2).sum().backward()
    opt.synchronize()
    check(torch.allclose(model.weight.grad, want_w) and torch.allclose(model.bias.grad, want_b),
          "DistributedOptimizer gradients are the set's average")
    with opt.skip_synchronize():
        opt.step()


def outside():
    """Rank 4, in no set: Horovod's error for a collective on a set it is not in."""
    t = vals(R)
    for name, fn in (("allreduce", lambda: hvd.allreduce(t, process_set=EVEN)),
                     ("allreduce_async", lambda: hvd.allreduce_async(t, process_set=ODD)),
                     ("allgather", lambda: hvd.allgather(t, process_set=EVEN)),
                     ("broadcast_", lambda: hvd.broadcast_(t, 0, process_set=EVEN)),
                     ("barrier", lambda: hvd.barrier(process_set=ODD)),
                     ("broadcast_object", lambda: hvd.broadcast_object(1, 0, process_set=EVEN))):
        raises(ValueError, [f"kolo rank {R}: ", "rank 4 is not a member of the provided process set"], fn, name)
    # As in Horovod, a DistributedOptimizer on a set this rank is not in is the plain optimizer.
    p = torch.nn.Parameter(torch.zeros(2))
    opt = hvd.DistributedOptimizer(torch.optim.SGD([p], lr=1.0), process_set=EVEN)
    p.sum().mul(3).backward()
    opt.step()
    check(p.tolist() == [-3.0, -3.0], f"the local step outside the set: {p.tolist()}")


def added_and_removed():
    """A set added after init (collective over all ranks), used, removed."""
    low = hvd.add_process_set([0, 1, 2])
    check(low.process_set_id not in (0, EVEN.process_set_id, ODD.process_set_id) and low.size() == 3, f"{low}")
    if R in low.ranks:
        got = hvd.allreduce(torch.tensor([R], dtype=torch.int64), op=hvd.Sum, process_set=low)
        check(got.tolist() == [3], f"allreduce on the added set: {got.tolist()}")
    raises(ValueError, ["Attempted to add a duplicate process set"], lambda: hvd.add_process_set([2, 1, 0]),
           "a set added twice")
    check(hvd.remove_process_set(low) is True and low.process_set_id is None, "remove_process_set")
    check(hvd.remove_process_set(hvd.global_process_set) is False, "the global set cannot be removed")
    raises(ValueError, ["is not registered"], lambda: hvd.allreduce(torch.ones(1), process_set=low),
           "a removed set")


def mismatch():
    """In ODD, rank 1 receives a broadcast from rank 3 where rank 3
    allreduces: both get kolo's mismatch error naming the set's ranks and
    their world ranks. (Not the other way round: over TCP a broadcast's root
    only sends, so it cannot see what its peers called.)"""
    if MINE is not ODD:
        return
    t = torch.ones(10)
    try:
        if R == 1:
            hvd.broadcast_(t, 3, process_set=ODD)
        else:
            hvd.allreduce_(t, process_set=ODD)
    except hvd.HorovodInternalError as e:
        text = str(e)
        check("mismatched collectives" in text and "rank 0 (world rank 1)" in text and
              "broadcast(f32, 10, root=1)" in text and "allreduce(f32, 10, average)" in text,
              f"mismatch text {text!r}")
        return
    check(False, "the mismatch in the set went unnoticed")


properties()
if MINE is not None:
    collectives(MINE)
    optimizer(MINE)
else:
    outside()
added_and_removed()
mismatch()
# The world is unaffected by all of it.
got = hvd.allreduce(torch.tensor([R + 1], dtype=torch.int64), op=hvd.Sum)
check(got.tolist() == [15], f"world allreduce after the sets: {got.tolist()}")
done(f"process_sets rank {R} of {N}")
