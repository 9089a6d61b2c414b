"""worker.py DIR: hvd.start_timeline / stop_timeline (Horovod's API) on a small training loop:
named collectives, DistributedOptimizer's buckets, backward and step marks;
started and stopped twice; an unwritable path names itself. test_timeline.py
checks the files.
worker.py env: two named allreduces under KOLO_TIMELINE."""
import os
import sys

import torch

import kolo.torch as hvd
from common import check, done

out_dir = sys.argv[1]
hvd.init()
R, N = hvd.rank(), hvd.size()
if out_dir == "env":  # KOLO_TIMELINE started it in init(); shutdown() writes it
    hvd.allreduce(torch.ones(10), name="from.env")
    hvd.shutdown()
    done(f"timeline rank {R} of {N}")
    sys.exit(0)

try:
    hvd.start_timeline("/nonexistent/dir/t.json")
    check(False, "an unwritable timeline path was accepted")
except RuntimeError as e:
    check("/nonexistent/dir/t.json" in str(e), f"the error names the path: {e}")

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(20, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                               named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
for session in range(2):
    hvd.start_timeline(os.path.join(out_dir, f"t{session}.json"), mark_cycles=True)
    try:
        hvd.start_timeline(os.path.join(out_dir, "again.json"))
        check(False, "a second start_timeline was accepted")
    except RuntimeError as e:
        check("already recording" in str(e), f"second start: {e}")
    hvd.allreduce(torch.ones(10), name="my.tensor")
    hvd.broadcast(torch.ones(3), root_rank=0, name="my.broadcast")
    for step in range(3):
        opt.zero_grad()
        loss = model(torch.randn(8, 20)).pow(2).mean()
        loss.backward()
        opt.step()
    hvd.stop_timeline()
    hvd.stop_timeline()  # nothing when off
hvd.allreduce(torch.ones(10), name="not.recorded")
hvd.shutdown()
done(f"timeline rank {R} of {N}")
