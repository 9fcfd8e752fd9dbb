"""DistributedOptimizer on 2 and 3 ranks under the real hvdrun, against one process on the
full batch."""
from __future__ import annotations

import pytest

from conftest import WORKERS, assert_checks, engine_missing, run_job

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(engine_missing() is not None, reason=str(engine_missing()))

CHECKS = ["sgd_equals_full_batch", "adam_equals_full_batch", "op_sum", "gradient_predivide_factor",
          "backward_passes_per_step", "unused_parameters_get_zero_gradients", "fp16_compression",
          "groups_int_and_lists", "load_state_dict_forgets_a_partly_counted_group", "sparse_gradients", "synchronize_then_clip_then_step", "join_with_uneven_data",
          "misuse_is_a_clear_error"]
_jobs: dict = {}


def job(n: int):
    if n not in _jobs:
        _jobs[n] = run_job(n, [str(WORKERS / "optimizer_worker.py")], timeout=240)
    return _jobs[n]


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("name", CHECKS)
def test_distributed_optimizer(name: str, n: int) -> None:
    assert_checks(job(n), name, n)


@pytest.mark.parametrize("n", [2, 3])
def test_optimizer_job_ends_cleanly(n: int) -> None:
    j = job(n)
    assert j.rc == 0, str(j)
