"""The worker of tests/chaos/chaos_elastic.py: a real (tiny) training loop under
hvdrun.torch.elastic: a linear model, Horovod's DistributedOptimizer, an ElasticSampler over
CE_SAMPLES samples, CE_BATCH samples per rank and batch, a commit after every batch. The
epochs go on (up to CE_EPOCHS) until the driver writes CE_DIR/stop: rank 0 looks for it at
each epoch's end and broadcasts what it saw, so that every rank stops at the same epoch.

Every batch, the ranks allgather (pid, slot number, the batch's sample indices, -1 for the
sampler's padding) and append it to `state.seen` (committed and restored with the model),
and rank 0 prints one line:

    STEP epoch=E batch=B size=N pids=P1,P2,... slots=S1,S2,...

At the end every rank prints `DONE rank=R size=N params=<digest> seen=<digest>` and rank 0
writes `state.seen` to CE_DIR/seen.json. A rank whose slot has the file CE_DIR/raise.<slot>
(written by the driver) removes it and raises an exception at the point it names (one of
RAISE_POINTS) of its next batch."""
import hashlib
import json
import os
import time

import torch
import hvdrun.torch as hvd

SAMPLES = int(os.environ["CE_SAMPLES"])
EPOCHS = int(os.environ["CE_EPOCHS"])
BATCH = int(os.environ["CE_BATCH"])
PACE = float(os.environ.get("CE_PACE", "0.02"))  # s per batch: the pace of training, not an ordering
DIR = os.environ["CE_DIR"]
SLOT = os.environ["HVDRUN_ELASTIC_SLOT"]
SLOT_NO = int(os.environ["CE_SLOT_NO_" + SLOT.split(":")[0].replace(".", "_")])
RAISE_POINTS = ("forward", "backward", "gather", "commit")


class Samples(torch.utils.data.Dataset):
    def __init__(self):
        g = torch.Generator().manual_seed(7)
        self.x = torch.randn(SAMPLES, 4, generator=g)
        self.y = self.x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])

    def __len__(self):
        return SAMPLES

    def __getitem__(self, i):
        return self.x[i], self.y[i], i


def maybe_raise(point):
    path = os.path.join(DIR, "raise." + SLOT)
    try:
        with open(path) as f:
            wanted = f.read().strip()
    except OSError:
        return
    if wanted == point:
        os.unlink(path)
        raise RuntimeError(f"chaos: slot {SLOT} raises at {point}")


def digest(obj):
    return hashlib.sha256(json.dumps(obj).encode()).hexdigest()[:16]


hvd.init()
data = Samples()
torch.manual_seed(1)
model = torch.nn.Linear(4, 1)
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                                     named_parameters=model.named_parameters())
sampler = hvd.elastic.ElasticSampler(data, shuffle=True, seed=3)
state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, stop=False, seen=[])


def gathered(positions, idx):
    """(pid, slot, indices...) of every rank; a padded position's index is -1."""
    real = len(sampler.remaining_indices)
    marks = [int(i) if hvd.rank() + p * sampler.num_replicas < real else -1 for p, i in zip(positions, idx)]
    mine = torch.tensor([os.getpid(), SLOT_NO] + marks, dtype=torch.int64)
    return hvd.allgather(mine.unsqueeze(0)).tolist()


@hvd.elastic.run
def train(state):
    while state.epoch < EPOCHS and not state.stop:
        if len(state.seen) == state.epoch:
            state.seen.append([])
        loader = torch.utils.data.DataLoader(data, batch_size=BATCH, sampler=state.sampler)
        for b, (x, y, idx) in enumerate(loader):
            maybe_raise("forward")
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            maybe_raise("backward")
            loss.backward()
            optimizer.step()
            maybe_raise("gather")
            rows = gathered(range(b * BATCH, b * BATCH + len(idx)), idx.tolist())
            state.seen[state.epoch].append([r[2:] for r in rows])
            state.sampler.record_batch(b, BATCH)
            maybe_raise("commit")
            state.commit()
            if hvd.rank() == 0:
                print(f"STEP epoch={state.epoch} batch={len(state.seen[state.epoch])} size={hvd.size()} "
                      f"pids={','.join(str(r[0]) for r in rows)} slots={','.join(str(r[1]) for r in rows)}",
                      flush=True)
            time.sleep(PACE)
        state.epoch += 1
        state.sampler.set_epoch(state.epoch)
        # the driver's stop, agreed: rank 0 sees it
        state.stop = hvd.broadcast_object(os.path.exists(os.path.join(DIR, "stop")), root_rank=0)
        state.commit()


train(state)
params = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()[:16]
print(f"DONE rank={hvd.rank()} size={hvd.size()} params={params} seen={digest(state.seen)}", flush=True)
if hvd.rank() == 0:
    with open(os.path.join(DIR, "seen.json"), "w") as f:
        json.dump(state.seen, f)
hvd.shutdown()
