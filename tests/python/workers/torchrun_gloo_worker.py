"""A program written for torchrun that knows nothing of kolo: torch's own gloo
backend through env:// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), as
`torchrun --nproc-per-node N torchrun_gloo_worker.py` starts it; under kolorun
it must run unchanged (tools/kolorun/torchrun_env.h).

Checks on every rank: torch's rank and size are the variables', an allreduce
and an allgather give the exact results, and kolo was never imported. Prints
one line "torchrun_gloo rank R of N: local L/LS group G/GS elastic E: OK".
"""
import os
import sys

import torch
import torch.distributed as dist


def main():
    # KeyError when the launcher did not set them, as in any torchrun program.
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local, local_world = os.environ["LOCAL_RANK"], os.environ["LOCAL_WORLD_SIZE"]
    group, groups = os.environ["GROUP_RANK"], os.environ["GROUP_WORLD_SIZE"]
    dist.init_process_group("gloo")  # init_method env://: rank 0's TCPStore binds MASTER_PORT
    assert (dist.get_rank(), dist.get_world_size()) == (rank, world), (dist.get_rank(), dist.get_world_size())

    t = torch.full((5,), float(rank + 1))
    dist.all_reduce(t)
    assert t.tolist() == [world * (world + 1) / 2] * 5, t.tolist()
    parts = [torch.zeros(2, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(parts, torch.tensor([rank, 10 * rank]))
    assert [p.tolist() for p in parts] == [[r, 10 * r] for r in range(world)], parts
    dist.barrier()
    assert not any(m == "kolo" or m.startswith("kolo.") for m in sys.modules), "kolo was imported"
    elastic = dist.is_torchelastic_launched()
    dist.destroy_process_group()
    print(f"torchrun_gloo rank {rank} of {world}: local {local}/{local_world} group {group}/{groups} "
          f"elastic {elastic}: OK", flush=True)


if __name__ == "__main__":
    main()
