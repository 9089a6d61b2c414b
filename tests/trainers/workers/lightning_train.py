"""One Lightning job (lightning_model.py): fit, checkpoint, test; each rank writes what it saw.

  lightning_train.py OUT --strategy kolo|ddp_kolo|gloo [--plugin] [--devices N] [--num-nodes N]
                         [--kolo-init-first] [--spawn]

--strategy kolo: DDPStrategy(process_group_backend="kolo"); ddp_kolo: the
name kolo.lightning registers; gloo: DDPStrategy on gloo. --plugin passes
plugins=[KoloEnvironment()]. --kolo-init-first joins kolo (kolo.torch.init(),
kolo's own discovery) before the Trainer exists. --spawn makes --strategy kolo
Lightning's "ddp_spawn" (DDPStrategy(start_method="spawn")), which starts
workers of its own. Started as a plain process
(Lightning launches the other ranks), under kolorun or under srun. Rank r writes
OUT/rank<r>.pt (final weights) and OUT/rank<r>.json (who it was, the logged
metrics, Trainer.test's results), the .json last.
"""
import argparse
import json
import os
import sys

import torch
import torch.distributed as dist
import pytorch_lightning as pl
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.strategies import DDPStrategy

import kolo.lightning
from lightning_model import SEED, TEST, TRAIN, VAL, Regression, data, loader


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--strategy", choices=["kolo", "ddp_kolo", "gloo"], required=True)
    p.add_argument("--plugin", action="store_true")
    p.add_argument("--devices", type=int, default=2)
    p.add_argument("--num-nodes", type=int, default=1)
    p.add_argument("--kolo-init-first", action="store_true")
    p.add_argument("--spawn", action="store_true")
    a = p.parse_args()
    torch.set_num_threads(1)  # ranks share two cores
    pl.seed_everything(SEED)  # the first weights and the samplers' shuffling seed
    if a.kolo_init_first:
        kolo.torch.init()
    strategy = ("ddp_kolo" if a.strategy == "ddp_kolo" else
                DDPStrategy(process_group_backend=a.strategy, **({"start_method": "spawn"} if a.spawn else {})))
    trainer = pl.Trainer(accelerator="cpu", devices=a.devices, num_nodes=a.num_nodes, strategy=strategy,
                         plugins=[kolo.lightning.KoloEnvironment()] if a.plugin else None,
                         max_epochs=2, num_sanity_val_steps=0, logger=False, enable_progress_bar=False,
                         enable_model_summary=False, default_root_dir=a.out,
                         callbacks=[ModelCheckpoint(dirpath=os.path.join(a.out, "ckpt"), filename="final")])
    model = Regression()
    trainer.fit(model, loader(data(TRAIN, 0)), loader(data(VAL, 1)))
    rank = trainer.global_rank
    fitted = {"rank_value": trainer.callback_metrics["rank_value"].item()}
    torch.save(model.state_dict(), os.path.join(a.out, f"rank{rank}.pt"))
    # "best": every rank loads the checkpoint rank 0 wrote (the last epoch's: nothing is monitored).
    tested = trainer.test(model, loader(data(TEST, 2)), ckpt_path="best", verbose=False)
    env = trainer.strategy.cluster_environment
    seen = {
        "rank": rank, "world": trainer.world_size, "local_rank": trainer.local_rank,
        "node_rank": trainer.node_rank, "environment": type(env).__name__,
        "strategy": type(trainer.strategy).__name__, "backend": dist.get_backend(),
        "torch_rank": dist.get_rank(), "torch_world": dist.get_world_size(),
        # kolo's communicator exists when the backend is kolo (or it was joined first).
        "kolo": ({"rank": kolo.rank(), "size": kolo.size(), "local_rank": kolo.local_rank(),
                  "cross_size": kolo.cross_size(), "transport": kolo.transport()}
                 if kolo.is_initialized() else None),
        "launcher": {k: os.environ.get(k) for k in ("KOLO_RANK", "SLURM_PROCID", "LOCAL_RANK")},
        "fitted": fitted, "tested": tested, "pid": os.getpid(),
    }
    with open(os.path.join(a.out, f"rank{rank}.json.tmp"), "w") as f:
        json.dump(seen, f)
    os.rename(os.path.join(a.out, f"rank{rank}.json.tmp"), os.path.join(a.out, f"rank{rank}.json"))
    print(f"lightning_train rank {rank} of {trainer.world_size}: done", flush=True)


if __name__ == "__main__":
    sys.exit(main())
