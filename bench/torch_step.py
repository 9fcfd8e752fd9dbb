"""One rank of scripts/bench-torch.sh: times training steps of one model in one mode.

Modes (all launched the same way, by hvdrun, with the same model, batch and threads):
  hvd      hvdrun.torch's DistributedOptimizer (each gradient's allreduce starts in backward)
  ddp      torch DistributedDataParallel on gloo (env:// from hvdrun's environment)
  local    no communication at all: the compute of a step (both ranks still run at once)
  serial   backward first, then every gradient allreduced with hvdrun.torch (nothing overlaps)
  horovod  the real Horovod's DistributedOptimizer (horovod.torch from scripts/horovod-peer.sh's
           venv), launched by horovodrun or by hvdrun --horovod (scripts/bench-vs-horovod.sh)
Rank 0 prints one line: RESULT mode model params batch median_ms min_ms.
"""

import argparse
import os
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--mode", choices=["hvd", "ddp", "local", "serial", "horovod"], required=True)
p.add_argument("--model", choices=["example", "mlp50m", "resnet18"], required=True)
p.add_argument("--batch", type=int, default=64)
p.add_argument("--steps", type=int, default=10)
p.add_argument("--warmup", type=int, default=3)
args = p.parse_args()

# hvdrun sets both sets of names; horovodrun only Horovod's.
rank = int(os.environ.get("RANK", os.environ.get("HOROVOD_RANK", "0")))
world = int(os.environ.get("WORLD_SIZE", os.environ.get("HOROVOD_SIZE", "1")))
local_size = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("HOROVOD_LOCAL_SIZE", "1")))
torch.set_num_threads(max(1, (os.cpu_count() or 1) // local_size))
torch.manual_seed(0)


def make_model():
    if args.model == "example":  # examples/pytorch_train.py's MLP
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10)), (1, 28, 28)
    if args.model == "mlp50m":  # about 50M parameters
        return nn.Sequential(nn.Linear(2048, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(),
                             nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 2048), nn.ReLU(),
                             nn.Linear(2048, 10)), (2048,)
    import torchvision  # Debian's python3-torchvision
    return torchvision.models.resnet18(num_classes=10), (3, 64, 64)


model, shape = make_model()
params = sum(q.numel() for q in model.parameters())
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
g = torch.Generator().manual_seed(rank)
x = torch.randn((args.batch,) + shape, generator=g)
y = torch.randint(0, 10, (args.batch,), generator=g)

if args.mode == "ddp":
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    dist.init_process_group("gloo", init_method="env://")
    model = DDP(model)
else:
    if args.mode == "horovod":
        import horovod.torch as hvd
    else:
        import hvdrun.torch as hvd
    hvd.init()
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    if args.mode in ("hvd", "horovod"):
        opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())


def step():
    opt.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    if args.mode == "serial":
        grads = [q.grad for q in model.parameters()]
        hvd.grouped_allreduce_(grads, name="serial")
    opt.step()


def barrier():
    if args.mode == "ddp":
        dist.barrier()
    elif args.mode != "local" or world > 1:
        hvd.barrier()


times = []
for i in range(args.warmup + args.steps):
    barrier()
    t = time.perf_counter()
    step()
    times.append(time.perf_counter() - t)
times = times[args.warmup:]
# Every rank's median: a step is as slow as its slowest rank.
worst = torch.tensor([statistics.median(times)], dtype=torch.float64)
if args.mode == "ddp":
    dist.all_reduce(worst, op=dist.ReduceOp.MAX)
else:
    worst = hvd.allreduce(worst, op=hvd.Max, name="bench.median")
if rank == 0:
    print(f"RESULT {args.mode} {args.model} {params} {args.batch} {worst.item() * 1e3:.2f} {min(times) * 1e3:.2f}",
          flush=True)
if args.mode == "ddp":
    dist.destroy_process_group()
else:
    hvd.shutdown()
