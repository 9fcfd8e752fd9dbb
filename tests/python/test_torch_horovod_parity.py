"""What Horovod 0.28.1's own test_torch.py asks of hvdrun.torch beyond the basic collectives
(scripts/test-horovod-suite.sh runs those tests themselves; CI holds the behaviour with these):
build queries, int16/bool, grouped allgather/reducescatter, sparse allreduce, Adasum refused,
Horovod's errors on every rank. One job per rank count, on 2 and 3 ranks."""
from __future__ import annotations

import pytest

from conftest import WORKERS, assert_checks, engine_missing, run_job

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(engine_missing() is not None, reason=str(engine_missing()))

CHECKS = ["timeline_dynamic_writes_no_file", "build_queries_as_horovods_gloo_build", "int16_and_bool_in_every_collective",
          "grouped_allgather_variable_rows_async_and_grad", "grouped_reducescatter_ops_scales_async_and_grad",
          "sparse_allreduce_and_sparse_optimizer", "horovods_errors_on_every_rank",
          "a_finished_name_is_taken_until_synchronized", "join_then_allgather_fails_and_the_ranks_go_on", "allgather_or_alltoall_of_a_0d_tensor_fails_on_every_rank",
          "horovods_argument_orders_and_default_names"]
_jobs: dict = {}


def job(n: int):
    if n not in _jobs:
        _jobs[n] = run_job(n, [str(WORKERS / "horovod_compat_worker.py")], timeout=180)
    return _jobs[n]


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("name", CHECKS)
def test_torch_horovod_parity(name: str, n: int) -> None:
    assert_checks(job(n), name, n)
