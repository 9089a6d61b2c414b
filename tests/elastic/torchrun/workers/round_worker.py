"""One worker of torchrun's restart rounds with backend "kolo" (test_torchrun_rounds.py).

Every round torchrun starts fresh processes; each makes a new kolo process
group (init_process_group("kolo")), whose communicator and store live as long
as the round. Each step allreduces rank+1 and checks the sum against the
round's world size, so a rank left over from an earlier round, or a stale
store key, shows up as a wrong sum or a hang. argv: DIR MODE
  fail-once  first round: one checked step, then rank 1 exits with 7 while
             the others wait in the next allreduce; later rounds: a checked
             step, a broadcast of the round number, then exit 0.
  follow     steps until the world has 2 ranks and DIR/after-kill exists
             (the test creates it just before it kills the other node), then
             20 more steps and exit 0.
"""
import os
import sys
import time

import torch
import torch.distributed as dist

import kolo.torch  # noqa: F401  (registers the "kolo" backend)

out_dir, mode = sys.argv[1], sys.argv[2]
restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])  # this node's agent's count
dist.init_process_group("kolo")
rank, size = dist.get_rank(), dist.get_world_size()
assert dist.get_backend() == "kolo", dist.get_backend()


def say(line):
    # One write(2) per line: the ranks of a node share the agent's log file, and
    # print() under an unbuffered stdout writes the text and its newline apart,
    # so two ranks' lines could interleave ("step 10restart 0 rank 1 ... \n\n").
    os.write(1, (line + "\n").encode())


say(f"start restart {restart} rank {rank} of {size}")


def step():
    t = torch.full((1000,), float(rank + 1), dtype=torch.float64)
    dist.all_reduce(t)
    expected = size * (size + 1) / 2
    assert torch.equal(t, torch.full_like(t, expected)), f"rank {rank} of {size}: sum {t[0].item()} != {expected}"


if mode == "fail-once":
    step()
    if restart == 0:
        if rank == 1:
            os._exit(7)
        step()  # meets the lost rank: kolo's error, or torchrun's SIGTERM first
        sys.exit(f"rank {rank}: the step after rank 1's exit did not fail")
    b = torch.tensor([restart if rank == 0 else -1], dtype=torch.int64)
    dist.broadcast(b, 0)
    assert b.item() == restart, b
    say(f"restart {restart} rank {rank} of {size}: OK")
elif mode == "follow":
    done_after = None
    for n in range(1, 100000):
        step()
        if n % 10 == 0:
            say(f"restart {restart} rank {rank} of {size} step {n}")
        if done_after is None and size == 2 and os.path.exists(os.path.join(out_dir, "after-kill")):
            done_after = n + 20
        if n == done_after:
            break
        time.sleep(0.05)
    say(f"done rank {rank} of {size}")
else:
    sys.exit(f"unknown mode {mode}")
dist.destroy_process_group()
