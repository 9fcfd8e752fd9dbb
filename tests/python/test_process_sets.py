"""Issue 29.4 and 29.6: shapes negotiated as Horovod's, and process sets (static and
dynamic), each a 3-rank job under the real hvdrun (workers/process_sets_worker.py)."""
from __future__ import annotations

import pytest

from conftest import WORKERS, assert_checks, engine_missing, run_job

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(engine_missing() is not None, reason=str(engine_missing()))

CHECKS = ["shapes_are_negotiated_not_only_counts", "the_table_and_each_sets_view",
          "collectives_run_within_each_set_at_once", "a_rank_outside_the_set_or_root_is_refused_at_once",
          "an_optimizer_averages_within_its_set", "adding_and_removing_sets_follow_horovods_rules"]
_jobs: dict = {}


def job(mode: str):
    if mode not in _jobs:
        env = {"HOROVOD_DYNAMIC_PROCESS_SETS": "1"} if mode == "dynamic" else {}
        _jobs[mode] = run_job(3, [str(WORKERS / "process_sets_worker.py"), mode], timeout=120, env=env)
    return _jobs[mode]


@pytest.mark.parametrize("mode", ["static", "dynamic"])
@pytest.mark.parametrize("name", CHECKS)
def test_process_sets(name: str, mode: str) -> None:
    assert_checks(job(mode), name, 3)


@pytest.mark.parametrize("mode", ["static", "dynamic"])
def test_process_sets_job_ends_cleanly(mode: str) -> None:
    j = job(mode)
    assert j.rc == 0 and "NO ERROR" not in j.out, str(j)
    assert sorted(line.split(":", 1)[1] for line in j.out.splitlines() if ":DONE" in line) == \
        [f"DONE {k}" for k in range(3)], str(j)
