"""Rank program of test_fsdp.py's memory check on backend "kolo": a completed
collective's output is freed once the program drops it (and its work), as on
gloo, while a work or a future that the program holds keeps its result.

Why FSDP cares: FSDP2 all-gathers each layer's full parameters into a fresh
tensor per call and drops it after copying out; had the group kept the
outputs of completed works alive (kolo pins its last 64 completed works for
C++ callers; process_group_work.py), every rank would hold dozens of dead
full-size parameter copies. Prints "fsdp_release rank R of N: OK" at the end.
"""
import gc
import weakref

import torch
import torch.distributed as dist

import kolo.torch  # noqa: F401  (registers the backend)

NEWER = 16  # later collectives: push the dropped work past the newest few, which keep results


def later_collectives():
    for _ in range(NEWER):
        dist.all_reduce(torch.ones(1))


def check(cond, what):
    if not cond:
        raise AssertionError(f"rank {dist.get_rank()}: {what}")


def main():
    dist.init_process_group("kolo")
    rank, n = dist.get_rank(), dist.get_world_size()
    x = torch.full((1000,), float(rank))
    want = torch.arange(n, dtype=torch.float32).repeat_interleave(1000)

    # Dropped by the program: freed, whether waited on or never waited on.
    dropped = []
    for waited in (True, False):
        out = torch.empty(n * 1000)
        work = dist.all_gather_into_tensor(out, x, async_op=True)
        if waited:
            work.wait()
        dropped.append(weakref.ref(out))
        del out, work
    later_collectives()
    gc.collect()
    check(all(ref() is None for ref in dropped),
          "the kolo group keeps the output of a completed all_gather_into_tensor alive after the program dropped it")

    # Held by the program: the work's result and future stay readable.
    out = torch.empty(n * 1000)
    work = dist.all_gather_into_tensor(out, x, async_op=True)
    future = dist.all_reduce(torch.ones(3), async_op=True).get_future()
    later_collectives()
    work.wait()
    check(work.result()[0] is out and torch.equal(out, want), "a held work lost its result")
    check(work.get_future().value()[0] is out, "a held work's future lost its value")
    check(torch.equal(future.wait()[0], torch.full((3,), float(n))), "a held future lost its value")
    dist.destroy_process_group()
    print(f"fsdp_release rank {rank} of {n}: OK", flush=True)


if __name__ == "__main__":
    main()
