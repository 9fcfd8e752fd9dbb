"""A real Horovod PyTorch program (horovod.torch from the peer venv, scripts/horovod-peer.sh),
run unchanged under `horovodrun --gloo` and `hvdrun --horovod`.

Every rank prints one line, RESULT <json>: what Horovod says the rank is, and the results of
allreduce (sum, average), allgather (uneven first dimensions), broadcast_parameters and a few
DistributedOptimizer steps. The tests compare those lines between launchers; the program
itself checks what has an exact answer and says CHECKFAIL <what> when it is not met.

  --die-rank R --die-code C   rank R exits with code C after the first allreduce, while the
                              others go on to the next collective (the job must end)
  --fill-store                before hvd.init(), rank 0 PUTs keys of its own into Horovod's
                              store until it refuses one, and prints FILLED <keys> <status>
"""

import argparse
import json
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import horovod.torch as hvd

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=4)
p.add_argument("--die-rank", type=int, default=-1)
p.add_argument("--die-code", type=int, default=7)
p.add_argument("--fill-store", action="store_true")
p.add_argument("--tag", default="")  # marks the job's processes for the tests' leftover check
args = p.parse_args()

torch.set_num_threads(1)  # same arithmetic whatever the machine's load
if args.fill_store and os.environ["HOROVOD_RANK"] == "0":
    import urllib.error
    import urllib.request
    base = "http://%s:%s" % (os.environ["HOROVOD_GLOO_RENDEZVOUS_ADDR"], os.environ["HOROVOD_GLOO_RENDEZVOUS_PORT"])
    n, status = 0, 200
    while status == 200 and n < 100000:
        try:
            with urllib.request.urlopen(urllib.request.Request("%s/filler/k%d" % (base, n), data=b"x", method="PUT"),
                                        timeout=10) as f:
                status = f.status
        except urllib.error.HTTPError as e:
            status = e.code
        n += status == 200
    print("FILLED", n, status, flush=True)
hvd.init()
rank, size = hvd.rank(), hvd.size()
failed = []


def check(ok, what):
    if not ok:
        failed.append(what)


def values(t):
    return [float(v) for v in t.flatten().tolist()]


res = {"rank": rank, "size": size, "local_rank": hvd.local_rank(), "local_size": hvd.local_size(),
       "cross_rank": hvd.cross_rank(), "cross_size": hvd.cross_size(), "gloo": hvd.gloo_enabled(),
       "mpi": hvd.mpi_enabled()}

# allreduce: integers (exact), floats summed and averaged.
ints = torch.arange(12, dtype=torch.int64) * (rank + 1)
s = hvd.allreduce(ints, op=hvd.Sum, name="ints")
check(s.tolist() == [i * size * (size + 1) // 2 for i in range(12)], "allreduce int64 sum")
res["allreduce_ints"] = s.tolist()

if args.die_rank == rank:
    sys.stdout.flush()
    os._exit(args.die_code)

g = torch.Generator().manual_seed(1000 + rank)
floats = torch.randn(257, generator=g)
res["allreduce_sum"] = values(hvd.allreduce(floats, op=hvd.Sum, name="floats.sum"))
avg = hvd.allreduce(floats, op=hvd.Average, name="floats.avg")
res["allreduce_avg"] = values(avg)
check(torch.allclose(avg * size, torch.tensor(res["allreduce_sum"]), rtol=1e-5, atol=1e-5), "average = sum / size")

# allgather: rank r contributes r + 1 rows of 3 values, all r.
rows = torch.full((rank + 1, 3), float(rank))
gathered = hvd.allgather(rows, name="rows")
want = torch.cat([torch.full((r + 1, 3), float(r)) for r in range(size)])
check(torch.equal(gathered, want), "allgather uneven rows")
res["allgather"] = values(gathered)

# broadcast_parameters: each rank makes its model from its own seed; rank 0's wins.
torch.manual_seed(rank)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
torch.manual_seed(0)
ref = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
check(all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), ref.state_dict().values())),
      "broadcast_parameters from rank 0")
res["broadcast"] = [float(t.sum()) for t in model.state_dict().values()]

# DistributedOptimizer: a few SGD steps on each rank's own batch; the averaged gradients keep
# every rank's parameters the same.
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
hvd.broadcast_optimizer_state(opt, root_rank=0)
opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
g = torch.Generator().manual_seed(2000 + rank)
x, y = torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g)
losses = []
for _ in range(args.steps):
    opt.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    losses.append(float(loss))
res["losses"] = losses
flat = torch.cat([q.detach().flatten() for q in model.parameters()])
res["params"] = [float(flat.sum()), float(flat.abs().sum()), values(flat[:8])]
every = hvd.allgather(flat.unsqueeze(0), name="params.all")
check(all(torch.equal(every[r], flat) for r in range(size)), "parameters equal on every rank after the steps")

res["failed"] = failed
print("RESULT " + json.dumps(res, sort_keys=True), flush=True)
for what in failed:
    print(f"CHECKFAIL {what}", flush=True)
hvd.shutdown()
sys.exit(1 if failed else 0)
