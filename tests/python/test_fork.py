"""Forked children of a rank leave the parent's job alone (issue 30.6): os.fork,
multiprocessing's fork start method, torch DataLoader workers (where torch is)."""
from __future__ import annotations

import pytest

from conftest import WORKERS, assert_checks, run_job

CHECKS = ["os_fork_child_leaves_the_job_alone", "multiprocessing_fork_children_leave_the_job_alone",
          "dataloader_workers_read_the_rank"]


@pytest.fixture(scope="module")
def job():
    return run_job(2, [str(WORKERS / "fork_worker.py")], timeout=180)


@pytest.mark.parametrize("name", CHECKS)
def test_forked_children(job, name: str) -> None:
    assert_checks(job, name, 2)


def test_job_ends_cleanly(job) -> None:
    assert job.rc == 0, str(job)
