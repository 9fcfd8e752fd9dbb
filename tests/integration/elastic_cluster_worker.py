"""The worker of tests/integration/elastic_cluster_test.cc: hvdrun.torch.elastic's run over a
small model trained with averaged gradients on the netns hosts. One STEP line per batch
(batch, rank, size, the allreduce's sum, slot, pid); each worker writes its pid to
EW_DIR/pid.<slot>, rank 0 the batch and size it reached to EW_DIR/progress. The loop ends
when every rank agrees that EW_DIR/stop exists and the batch is past EW_MIN_BATCHES; DONE
then carries a digest of the parameters, equal on every rank when they agree."""
import hashlib
import os
import time

import torch
import hvdrun.torch as hvd

DIR = os.environ["EW_DIR"]
MIN_BATCHES = int(os.environ.get("EW_MIN_BATCHES", "5"))
SLOT = os.environ["HVDRUN_ELASTIC_SLOT"]
with open(os.path.join(DIR, "pid." + SLOT), "w") as f:
    f.write(str(os.getpid()))

hvd.init()
torch.manual_seed(1)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
state = hvd.elastic.TorchState(model, opt, batch=0)


def write_progress():
    tmp = os.path.join(DIR, "progress.tmp")
    with open(tmp, "w") as f:
        f.write(f"{state.batch} {hvd.size()}\n")
    os.replace(tmp, os.path.join(DIR, "progress"))


@hvd.elastic.run
def train(state):
    while True:
        s = hvd.allreduce(torch.ones(1), op=hvd.Sum).item()
        x = torch.full((2, 4), float(state.batch % 7 + hvd.rank()))
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        for p in model.parameters():
            p.grad = hvd.allreduce(p.grad, op=hvd.Average)
        opt.step()
        print(f"STEP batch={state.batch} rank={hvd.rank()} size={hvd.size()} sum={s:g} slot={SLOT} "
              f"pid={os.getpid()}", flush=True)
        if hvd.rank() == 0:
            write_progress()
        stop = float(os.path.exists(os.path.join(DIR, "stop")) and state.batch >= MIN_BATCHES)
        state.batch += 1
        state.commit()
        if hvd.allreduce(torch.tensor([stop]), op=hvd.Min).item() > 0:
            return
        time.sleep(0.02)


train(state)
digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()[:16]
print(f"DONE rank={hvd.rank()} size={hvd.size()} batch={state.batch} params={digest} pid={os.getpid()}", flush=True)
hvd.shutdown()
