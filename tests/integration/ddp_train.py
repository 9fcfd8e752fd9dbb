# An unchanged PyTorch DDP script: everything it needs comes from the environment.
import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo", init_method="env://")
rank, world = dist.get_rank(), dist.get_world_size()
assert world == int(os.environ["WORLD_SIZE"]) == int(os.environ["HOROVOD_SIZE"])

torch.manual_seed(0)
model = DDP(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    x = torch.full((8, 4), float(rank + 1))
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()

# Parameters must be identical on every rank after DDP's gradient allreduce.
w = model.module.weight.detach().clone()
gathered = [torch.zeros_like(w) for _ in range(world)]
dist.all_gather(gathered, w)
assert all(torch.equal(g, w) for g in gathered), "parameters diverged"
t = torch.tensor([float(rank)])
dist.all_reduce(t)
assert t.item() == sum(range(world))
print(f"rank {rank}/{world} ok", flush=True)
dist.destroy_process_group()
