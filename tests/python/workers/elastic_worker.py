"""hvd.elastic in a job that is not elastic (hvdrun -np N --horovod-compat): the names
horovod.torch.elastic serves, the sync from rank 0 at the start of run, commits that cost
no collective, restore, and a failure raised as it is (no reset outside an elastic job)."""
from __future__ import annotations

import torch

import horovod.torch as hvd
from checks import check

hvd.init()
torch.manual_seed(hvd.rank())  # every rank starts from other weights
model = torch.nn.Linear(3, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
sampler = hvd.elastic.ElasticSampler(list(range(20)), shuffle=False)
state = hvd.elastic.TorchState(model, opt, sampler=sampler, epoch=hvd.rank(), batch=0)
calls = []


@check
def horovod_names_are_hvdruns() -> None:
    import hvdrun.torch.elastic as e
    from horovod.common.elastic import ObjectState
    from horovod.common.exceptions import HostsUpdatedInterrupt
    from horovod.torch.elastic.sampler import ElasticSampler
    from horovod.torch.elastic.state import TorchState
    assert hvd.elastic is e and TorchState is e.TorchState and ElasticSampler is e.ElasticSampler
    assert ObjectState is e.ObjectState and HostsUpdatedInterrupt is e.HostsUpdatedInterrupt


@hvd.elastic.run
def train(state: hvd.elastic.TorchState) -> str:
    calls.append(1)
    weights = hvd.allgather(state.model.weight.detach().reshape(1, -1))
    assert all(torch.equal(weights[0], w) for w in weights), "not synced from rank 0"
    assert state.epoch == 0 and list(state.sampler) == list(range(hvd.rank(), 20, hvd.size()))
    for batch in range(3):
        state.optimizer.zero_grad()
        state.model(torch.ones(4, 3)).sum().backward()
        for p in state.model.parameters():
            p.grad = hvd.allreduce(p.grad, name=f"g{batch}.{tuple(p.shape)}")
        state.optimizer.step()
        state.batch = batch + 1
        state.commit()  # no collective outside an elastic job
        state.check_host_updates()
        assert state._host_messages.empty()
    committed = state.model.weight.detach().clone()
    state.model(torch.ones(4, 3)).sum().backward()
    state.optimizer.step()
    state.batch = 99
    state.restore()
    assert torch.equal(state.model.weight, committed) and state.batch == 3
    return "trained"


@check
def run_syncs_from_rank0_commits_and_restores() -> None:
    assert train(state) == "trained" and calls == [1]


@hvd.elastic.run
def fail(state: hvd.elastic.TorchState) -> None:
    calls.append(2)
    raise hvd.HorovodInternalError("a peer was lost")


@check
def a_failure_outside_an_elastic_job_is_raised_not_recovered() -> None:
    try:
        fail(state)
    except hvd.HorovodInternalError as e:
        assert "a peer was lost" in str(e) and calls == [1, 2], calls
    else:
        raise AssertionError("no HorovodInternalError")


hvd.shutdown()
print("DONE", flush=True)
