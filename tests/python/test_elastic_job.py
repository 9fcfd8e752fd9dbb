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


@pytest.mark.parametrize("flag", ["--horovod-compat", "--horovod"])
def test_a_real_horovods_elastic_is_refused_by_name(tmp_path: Path, flag: str) -> None:
    """A real Horovod's elastic mode talks to horovodrun's driver service, which hvdrun does
    not serve: an elastic launch of one is refused before anything starts (it was run, and
    its workers aborted in Gloo after 30 s)."""
    fake = tmp_path / "site" / "horovod"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    ran = tmp_path / "ran"
    j = run_job(2, ["-c", f"open({str(ran)!r}, 'a').write('x')"], timeout=60,
                env={"PYTHONPATH": str(tmp_path / "site")},
                hvdrun_args=[flag, "--min-np", "2", "-H", "localhost:1,127.0.0.1:1"])
    assert j.rc == 2, str(j)
    line = [l for l in j.err.splitlines() if "elastic" in l]
    assert line and "horovodrun" in line[0], j.err
    if flag == "--horovod-compat":
        assert str(tmp_path / "site" / "horovod") in line[0], j.err
    assert not ran.exists(), "a worker ran"
