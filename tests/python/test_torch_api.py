"""Every hvdrun.torch call on 1 and 3 ranks under the real hvdrun, against a reference."""
from __future__ import annotations

import pytest

from conftest import WORKERS, assert_checks, engine_missing, run_job

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(engine_missing() is not None, reason=str(engine_missing()))

CHECKS = ["topology", "allreduce_ops_and_dtypes", "allreduce_scales_and_average_keyword",
          "allreduce_in_place_and_async", "async_named_any_submission_order", "grouped_allreduce_all_forms",
          "allgather_per_rank_first_dims", "broadcast_all_forms", "alltoall_with_and_without_splits",
          "reducescatter_uneven_rows", "join_with_uneven_work", "barrier_and_objects",
          "broadcast_parameters_and_optimizer_state", "autograd_through_collectives", "fp16_compression",
          "sync_batch_norm_matches_full_batch", "bad_tensors_raise_clear_errors"]
_jobs: dict = {}


def job(n: int):
    if n not in _jobs:
        _jobs[n] = run_job(n, [str(WORKERS / "torch_api_worker.py")], timeout=240)
    return _jobs[n]


@pytest.mark.parametrize("n", [1, 3])
@pytest.mark.parametrize("name", CHECKS)
def test_torch_api(name: str, n: int) -> None:
    assert_checks(job(n), name, n)


@pytest.mark.parametrize("n", [1, 3])
def test_torch_api_job_ends_cleanly(n: int) -> None:
    j = job(n)
    assert j.rc == 0, str(j)
    assert sorted(line.split(":", 1)[1] for line in j.out.splitlines() if ":DONE" in line) == \
        [f"DONE {k}" for k in range(n)], str(j)


def test_mismatched_shapes_are_a_clear_error_not_a_hang() -> None:
    j = run_job(2, [str(WORKERS / "mismatch_worker.py")], timeout=120, env={"HVDRUN_TIMEOUT": "20"})
    caught = [line for line in j.out.splitlines() if "CAUGHT HorovodInternalError" in line]
    assert caught, str(j)
    assert any("mismatch" in line.lower() or "MISMATCH" in line for line in caught), str(j)
    assert "Traceback" not in j.err, str(j)


def test_grouped_allreduce_dtypes_differing_across_ranks_fail_at_once_not_hang() -> None:
    # Issue 30.5: a stall would end the job only at the stall shutdown, past the deadline below.
    j = run_job(2, [str(WORKERS / "grouped_mismatch_worker.py")], timeout=60,
                env={"HVDRUN_STALL_CHECK_TIME_SECONDS": "30", "HVDRUN_STALL_SHUTDOWN_TIME_SECONDS": "120"})
    caught = [line for line in j.out.splitlines() if "CAUGHT HorovodInternalError" in line]
    assert len(caught) == 2, str(j)
    assert all("mismatched dtype: float32 (every tensor) on rank 0; float32,float64 on rank 1" in line
               for line in caught), str(j)
    assert j.out.count("AGREE OK") == 2, str(j)
    assert j.rc == 0 and "Traceback" not in j.err, str(j)
