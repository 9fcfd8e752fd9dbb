"""hvdrun.numpy on 1, 2 and 3 ranks under the real hvdrun."""
from __future__ import annotations

import pytest

from conftest import WORKERS, assert_checks, run_job

CHECKS = ["topology", "allreduce_ops", "allreduce_in_place", "broadcast", "allgather", "bad_arguments", "barrier"]
_jobs: dict = {}


def job(n: int):
    if n not in _jobs:
        _jobs[n] = run_job(n, [str(WORKERS / "numpy_worker.py")], timeout=120)
    return _jobs[n]


@pytest.mark.parametrize("n", [1, 3])
@pytest.mark.parametrize("name", CHECKS)
def test_numpy(name: str, n: int) -> None:
    j = job(n)
    assert_checks(j, name, n)


@pytest.mark.parametrize("n", [1, 3])
def test_numpy_job_ends_cleanly(n: int) -> None:
    j = job(n)
    assert j.rc == 0, str(j)
    assert sorted(line.split(":", 1)[1] for line in j.out.splitlines() if ":DONE" in line) == \
        [f"DONE {k}" for k in range(n)], str(j)
