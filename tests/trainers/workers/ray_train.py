"""Ray Train driver for test_ray.py: a TorchTrainer with 2 workers on backend "kolo".

  python ray_train.py --address HOST:PORT --out DIR [--steps N]

Every worker writes DIR/rank<R>.pt: its ranks as Ray, torch and kolo see
them, the results of collectives over rank-distinct values, and its final
weights after DDP training (Ray's prepare_model) on its half of a fixed
batch. reference() is the same training in one process over the whole batch.
test_ray.py imports this file for reference(); run as a script it is the
Ray driver (Ray pickles train_func with the helpers below by value).
"""
import argparse
import os

import torch

LR = 0.05


def model_and_data(seed):
    """A small MLP (initialised from seed) and the fixed regression batch (64 x 8)."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(64, 8, generator=g)
    y = (x @ torch.randn(8, 1, generator=g)).sin()
    return model, x, y


def train(model, x, y, steps):
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()


def reference(steps):
    """One process, the whole batch, rank 0's initial weights."""
    model, x, y = model_and_data(0)
    train(model, x, y, steps)
    return model.state_dict()


def train_func(config):
    import ray.train
    import torch.distributed as dist
    from ray.train.torch import prepare_model

    import kolo.torch as kolo_torch

    torch.set_num_threads(1)
    ctx = ray.train.get_context()
    rank, world = dist.get_rank(), dist.get_world_size()
    # Collectives over values that differ by rank: a wrong rank or a missing
    # contribution changes the result.
    sums = torch.tensor([rank + 1.0, 10.0 ** rank], dtype=torch.float64)
    dist.all_reduce(sums)
    ints = torch.tensor([1000 * rank + 7], dtype=torch.int64)
    dist.all_reduce(ints)
    top = torch.tensor([10 * rank + 3], dtype=torch.int32)
    dist.all_reduce(top, op=dist.ReduceOp.MAX)
    gathered = [torch.zeros(3) for _ in range(world)]
    dist.all_gather(gathered, torch.full((3,), float(rank)))

    # Each rank starts from other weights: DDP's initial broadcast must give
    # every rank rank 0's, and the averaged gradients of the two halves must
    # train them as the whole batch does in one process.
    model, x, y = model_and_data(rank)
    model = prepare_model(model)
    train(model, x[rank::world], y[rank::world], config["steps"])
    torch.save({"ray_world_rank": ctx.get_world_rank(), "ray_local_rank": ctx.get_local_rank(),
                "ray_world_size": ctx.get_world_size(), "torch_rank": rank, "torch_size": world,
                "kolo_rank": kolo_torch.rank(), "kolo_size": kolo_torch.size(),
                "kolo_local_rank": kolo_torch.local_rank(), "backend": dist.get_backend(),
                "pid": os.getpid(), "sums": sums, "ints": ints, "top": top, "gathered": gathered,
                "state": {k: v.detach().clone() for k, v in model.module.state_dict().items()}},
               os.path.join(config["out"], f"rank{rank}.pt"))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--address", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=20)
    a = p.parse_args()

    import ray
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from kolo.ray import KoloConfig

    ray.init(address=a.address)
    try:
        trainer = TorchTrainer(train_func, train_loop_config={"out": a.out, "steps": a.steps},
                               scaling_config=ScalingConfig(num_workers=2, use_gpu=False),
                               torch_config=KoloConfig(),
                               run_config=RunConfig(name="kolo-test", storage_path=os.path.join(a.out, "results")))
        trainer.fit()
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
