"""hvd.elastic under the real hvdrun, in jobs that are not elastic (no membership change
can come): workers/elastic_worker.py, and Horovod's own elastic test program
(workers/horovod_elastic_torch_main.py, Horovod 0.28.1's test/integration/data/
elastic_torch_main.py unchanged) under --horovod-compat."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import WORKERS, assert_checks, engine_missing, run_job

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(engine_missing() is not None, reason=str(engine_missing()))

CHECKS = ["horovod_names_are_hvdruns", "run_syncs_from_rank0_commits_and_restores",
          "a_failure_outside_an_elastic_job_is_raised_not_recovered"]
_job: list = []


def job():
    if not _job:
        _job.append(run_job(2, [str(WORKERS / "elastic_worker.py")], timeout=180, hvdrun_args=["--horovod-compat"]))
    return _job[0]


@pytest.mark.parametrize("name", CHECKS)
def test_elastic_api_in_a_job_that_is_not_elastic(name: str) -> None:
    assert_checks(job(), name, 2)


def test_the_job_ends_cleanly() -> None:
    j = job()
    assert j.rc == 0 and j.out.count("DONE") == 2, str(j)


def test_horovods_elastic_test_program_runs_unchanged(tmp_path: Path) -> None:
    pytest.importorskip("psutil")  # (it imports psutil for its kill mode)
    log = tmp_path / "log.txt"
    j = run_job(2, [str(WORKERS / "horovod_elastic_torch_main.py"), "--epochs", "2", "--batches-per-epoch", "3",
                    "--logfile", str(log)], timeout=180, hvdrun_args=["--horovod-compat"])
    assert j.rc == 0, str(j)
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert [(x["epoch"], x["batch"], x["commits"], x["rank"], x["size"], x["rendezvous"]) for x in lines] == \
        [(0, 3, 3, 0, 2, 1), (1, 3, 7, 0, 2, 1)], lines  # (logged before the epoch's commit)
