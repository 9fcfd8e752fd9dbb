"""A Horovod-style PyTorch training script, runnable as it is:

    hvdrun -np 2 python3 examples/pytorch_train.py

An MLP 784-256-10 on synthetic MNIST-shaped data (made here, nothing downloaded), Adam with
the learning rate scaled by the number of ranks, a DistributedSampler, parameters and
optimizer state broadcast from rank 0, and a checkpoint written by rank 0 only. On a GPU
machine each rank uses the GPU of its local rank. The same script with
`import horovod.torch as hvd` runs under `hvdrun --horovod-compat`.
"""

import argparse
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

import hvdrun.torch as hvd

parser = argparse.ArgumentParser(description="hvdrun.torch example: an MLP on synthetic MNIST-shaped data")
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--batch-size", type=int, default=64, help="per rank")
parser.add_argument("--lr", type=float, default=0.001, help="per rank; scaled by the number of ranks")
parser.add_argument("--samples", type=int, default=4096, help="size of the synthetic data set")
parser.add_argument("--checkpoint", default="", help="where rank 0 saves the model (default: none)")
parser.add_argument("--no-cuda", action="store_true", help="train on the CPU even where a GPU is visible")
parser.add_argument("--seed", type=int, default=42)
args = parser.parse_args()

hvd.init()
torch.manual_seed(args.seed)
use_cuda = not args.no_cuda and torch.cuda.is_available()
if use_cuda:
    torch.cuda.set_device(hvd.local_rank())
device = torch.device("cuda", hvd.local_rank()) if use_cuda else torch.device("cpu")
torch.set_num_threads(max(1, (os.cpu_count() or 1) // hvd.local_size()))


def synthetic_mnist(n: int, seed: int) -> TensorDataset:
    """MNIST-shaped (1x28x28 in [0, 1], 10 classes) and learnable: each class is a fixed
    random template plus noise. The same on every rank."""
    g = torch.Generator().manual_seed(seed)
    templates = torch.rand(10, 1, 28, 28, generator=g)
    labels = torch.randint(0, 10, (n,), generator=g)
    images = (templates[labels] + 0.3 * torch.randn(n, 1, 28, 28, generator=g)).clamp(0, 1)
    return TensorDataset(images, labels)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(784, 256)
        self.fc2 = nn.Linear(256, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.relu(self.fc1(x.view(-1, 784))))


train_set = synthetic_mnist(args.samples, seed=1234)
sampler = DistributedSampler(train_set, num_replicas=hvd.size(), rank=hvd.rank(), shuffle=True, seed=args.seed)
loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler)

model = Net().to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=args.lr * hvd.size())
# Every rank starts from rank 0's weights and optimizer state.
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

for epoch in range(1, args.epochs + 1):
    model.train()
    sampler.set_epoch(epoch)
    start, total, batches = time.time(), 0.0, 0
    for data, target in loader:
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(data), target)
        loss.backward()
        optimizer.step()
        total += loss.item()
        batches += 1
    # The epoch's mean loss over every rank.
    mean_loss = hvd.allreduce(torch.tensor(total / max(batches, 1)), name="epoch_loss").item()
    if hvd.rank() == 0:
        seconds = time.time() - start
        print(f"epoch {epoch} loss {mean_loss:.4f} ({batches} steps per rank, {seconds:.2f} s, "
              f"{1000 * seconds / max(batches, 1):.1f} ms/step)", flush=True)

# Accuracy on the training data (each rank its shard, summed over ranks).
model.eval()
correct = torch.zeros(2)
with torch.no_grad():
    for data, target in loader:
        pred = model(data.to(device)).argmax(dim=1).cpu()
        correct += torch.tensor([float((pred == target).sum()), float(len(target))])
correct = hvd.allreduce(correct, op=hvd.Sum, name="accuracy")
checksum = sum(float(p.double().sum()) for p in model.parameters())
print(f"rank {hvd.rank()}: accuracy {correct[0] / correct[1]:.4f} params {checksum:.6f}", flush=True)

if hvd.rank() == 0 and args.checkpoint:
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epochs": args.epochs},
               args.checkpoint)
    print(f"saved {args.checkpoint}", flush=True)
hvd.shutdown()
