"""The worker of tests/launcher/elastic_job_test.cc: hvdrun.torch.elastic's run over a loop
of allreduces, one STEP line per batch (batch, rank, size, the sum, its slot and pid), DONE at
the end. EW_KILL_SLOT: that slot SIGKILLs itself at batch 5 of round 1; EW_ADD_AT (with
EW_HOSTS): rank 0 rewrites the discovery file at that batch, adding host 127.0.0.1;
EW_FINAL_SIZE: the loop goes on past its batches until the job has that many ranks (the
test's deadline bounds it). A worker that finishes while a failure ends its round:
EW_END_KILL_SLOT SIGKILLs itself once its training is done, EW_EXTRA_SLOT trains one batch
more (its round ends under it), EW_LATE_SLOT finishes once hvdrun has announced a new round
(60 s at most)."""
import os
import signal
import time

import torch
import hvdrun.torch as hvd

BATCHES = int(os.environ.get("EW_BATCHES", "30"))
KILL = os.environ.get("EW_KILL_SLOT", "")  # this slot SIGKILLs itself at batch 5 of round 1
FINAL_SIZE = int(os.environ.get("EW_FINAL_SIZE", "0"))
hvd.init()
model = torch.nn.Linear(2, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
state = hvd.elastic.TorchState(model, opt, batch=0, resets=0)


def on_reset():
    state.resets += 1


state.register_reset_callbacks([on_reset])


SLOT = os.environ["HVDRUN_ELASTIC_SLOT"]


@hvd.elastic.run
def train(state):
    while state.batch < BATCHES + (SLOT == os.environ.get("EW_EXTRA_SLOT")) or hvd.size() < FINAL_SIZE:
        s = hvd.allreduce(torch.ones(1), op=hvd.Sum).item()
        print(f"STEP batch={state.batch} rank={hvd.rank()} size={hvd.size()} sum={s:g} "
              f"slot={os.environ['HVDRUN_ELASTIC_SLOT']} pid={os.getpid()}", flush=True)
        if os.environ["HVDRUN_ELASTIC_SLOT"] == KILL and state.batch == 5 and os.environ["HVDRUN_ELASTIC_ROUND"] == "1":
            os.kill(os.getpid(), signal.SIGKILL)
        if os.environ.get("EW_ADD_AT") and hvd.rank() == 0 and state.batch == int(os.environ["EW_ADD_AT"]):
            open(os.environ["EW_HOSTS"], "w").write("localhost:2\n127.0.0.1:1\n")
        state.batch += 1
        state.commit()
        time.sleep(0.05)


train(state)
if SLOT == os.environ.get("EW_END_KILL_SLOT"):
    os.kill(os.getpid(), signal.SIGKILL)
if SLOT == os.environ.get("EW_LATE_SLOT"):
    from hvdrun import _capi
    deadline = time.monotonic() + 60
    while _capi.elastic_updates()[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
print(f"DONE rank={hvd.rank()} size={hvd.size()} batch={state.batch} pid={os.getpid()}", flush=True)
hvd.shutdown()
