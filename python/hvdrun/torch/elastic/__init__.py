"""hvd.elastic (horovod/torch/elastic): elastic training with PyTorch.

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            ...
            state.commit()

    state = hvd.elastic.TorchState(model, optimizer, epoch=0)
    train(state)

In a job started with hvdrun's elastic flags (--min-np, --max-np, --host-discovery-script,
...), a failure of the round (a worker lost) raises HorovodInternalError: `run` restores
the last commit and joins the next round; a change of hosts raises HostsUpdatedInterrupt
at a commit on every rank: `run` joins the next round keeping the state. Outside an
elastic job a failure is raised as it is."""

from hvdrun.common.elastic import ObjectState, State, run_fn
from hvdrun.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt, WorkerRemoved
from hvdrun.torch import _handles
from hvdrun.torch.elastic.sampler import ElasticSampler
from hvdrun.torch.elastic.state import TorchState
from hvdrun.torch.mpi_ops import init, shutdown


def run(func):  # type: ignore[no-untyped-def]
    """Decorator that runs `func(state, ...)` across the resets of an elastic job.

    Before `func` runs, the state is synced from a rank that has one (a worker that just
    joined receives it); when workers are lost or hosts change, every worker leaves `func`
    at the same point, the round is reset, and `func` runs again. `func` must not begin
    with a collective of its own: a worker joining would meet the others' sync in it.

    Args:
        func: a function whose first argument is the State (TorchState) to keep.
    """
    return run_fn(func, _reset)


def _reset() -> None:
    """Leaves this round and joins the next (new rank and size): shutdown() releases the
    round's handles, and Python's records of them go with them (Horovod's #3109 leak)."""
    shutdown()
    _handles.release_all()
    init()


__all__ = ["TorchState", "ElasticSampler", "run", "State", "ObjectState", "HorovodInternalError",
           "HostsUpdatedInterrupt", "WorkerRemoved"]
