"""Horovod Elastic's PyTorch program on kolo: Fashion-MNIST that goes on when
hosts are lost or added. The import line is the only change from Horovod.

  kolorun --min-np 2 --max-np 6 --host-discovery-script ./discover_hosts.sh \\
      /usr/bin/python3 examples/python/elastic_fashion_mnist.py
  kolorun --min-np 2 -H a:2,b:2 /usr/bin/python3 examples/python/elastic_fashion_mnist.py

The Horovod Elastic shape (README "Elastic"): the model, the optimizer, an
ElasticSampler and the epoch/batch counters live in an hvd.elastic.TorchState;
the training function is wrapped in @hvd.elastic.run; every --commit-every
batches state.commit() keeps a copy of the state in memory and lets added
workers join. When a worker or host is lost, the survivors' collectives fail,
they restore the last commit, re-form among themselves and go on; workers that
join get the state from a survivor. The learning rate follows the number of
ranks (a reset callback). Same network, data and test as
examples/python/horovod_fashion_mnist.py. --log-steps prints one line per
committed batch on rank 0 (the elastic tests time recoveries with it).
"""
import time

import torch
import torch.nn.functional as F
import torch.utils.data

# The same network, data, progress bar and test as the Horovod example, and
# its `import kolo.torch as hvd` (was: import horovod.torch as hvd).
from horovod_fashion_mnist import Net, common_args, hvd, progress, start, test


def parse_args():
    p = common_args("kolo (Horovod Elastic API) Fashion-MNIST example")
    p.add_argument("--commit-every", type=int, default=10, help="batches between commits")
    p.add_argument("--log-steps", action="store_true", help="rank 0: a line per committed batch")
    return p.parse_args()


def main():
    args = parse_args()
    train_set, test_set, device = start(args)

    model = Net().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=args.momentum)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(), op=hvd.Average)
    sampler = hvd.elastic.ElasticSampler(train_set, shuffle=True, seed=args.seed)
    # `step` counts committed batches over the whole job: it proves that none
    # is lost or applied twice across re-formations (rank 0 logs it).
    state = hvd.elastic.TorchState(model=model, optimizer=optimizer, sampler=sampler, epoch=1, batch=0, step=0)

    def on_reset():
        for group in optimizer.param_groups:
            group["lr"] = args.lr * hvd.size()
        if hvd.rank() == 0:
            print(f"re-formed: {hvd.size()} ranks, lr {args.lr * hvd.size()}", flush=True)

    state.register_reset_callbacks([on_reset])
    if hvd.rank() == 0:
        print(f"{hvd.size()} ranks on {device.type}, batch {args.batch_size} per rank, lr {args.lr * hvd.size()}",
              flush=True)
    train(state, args, train_set)

    test_sampler = torch.utils.data.distributed.DistributedSampler(
        test_set, num_replicas=hvd.size(), rank=hvd.rank(), shuffle=False)
    test(model, torch.utils.data.DataLoader(test_set, batch_size=args.test_batch_size, sampler=test_sampler),
         test_sampler)


@hvd.elastic.run
def train(state, args, train_set):
    device = next(state.model.parameters()).device
    while state.epoch <= args.epochs:
        state.model.train()
        loader = torch.utils.data.DataLoader(train_set, batch_size=args.batch_size, sampler=state.sampler)
        steps, start = len(loader), time.time()
        marks = {max(1, steps * k // 10) for k in range(1, 11)}
        for batch_idx, (data, target) in enumerate(loader):
            data, target = data.to(device), target.to(device)
            state.optimizer.zero_grad()
            loss = F.nll_loss(state.model(data), target)
            loss.backward()
            state.optimizer.step()
            state.batch = batch_idx
            state.sampler.record_batch(batch_idx, args.batch_size)
            if (batch_idx + 1) % args.commit_every == 0:
                state.step += 1
                if args.log_steps and hvd.rank() == 0:
                    print(f"step {state.step} epoch {state.epoch} size {hvd.size()} loss {loss.item():.3f} "
                          f"at {time.time():.3f}", flush=True)
                state.commit()
            if hvd.rank() == 0 and batch_idx + 1 in marks:
                progress(state.epoch, args.epochs, batch_idx + 1, steps, loss.item(),
                         (batch_idx + 1) * args.batch_size * hvd.size() / (time.time() - start))
        state.epoch += 1
        state.batch = 0
        state.sampler.set_epoch(state.epoch)
        state.commit()


if __name__ == "__main__":
    main()
