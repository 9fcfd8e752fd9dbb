"""hvdrun.torch's prescale, postscale and Average on integer tensors (Horovod's rule: the
result keeps the tensor's dtype, each element scaled in float64 and truncated), and bad
arguments refused before anything is submitted: the job's timeline (every collective that
ran, by name) holds none of the refused calls' names."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, Tuple

import pytest

from conftest import WORKERS, Job, assert_checks, engine_missing, run_job

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(engine_missing() is not None, reason=str(engine_missing()))

CHECKS = ["reducescatter_integer_prescale_issue_case", "reducescatter_integer_scaling_as_horovod",
          "allreduce_integer_scaling_as_horovod", "grouped_allreduce_mixed_dtypes_scaling_as_horovod",
          "bad_arguments_refused_by_the_call"]
_jobs: Dict[int, Tuple[Job, Path]] = {}


def job(n: int, tmp_path_factory: pytest.TempPathFactory) -> Tuple[Job, Path]:
    if n not in _jobs:
        timeline = tmp_path_factory.mktemp(f"scaling{n}") / "timeline.json"
        _jobs[n] = (run_job(n, [str(WORKERS / "torch_scaling_worker.py")], timeout=240,
                            hvdrun_args=["--timeline-filename", str(timeline)]), timeline)
    return _jobs[n]


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("name", CHECKS)
def test_torch_scaling(name: str, n: int, tmp_path_factory: pytest.TempPathFactory) -> None:
    assert_checks(job(n, tmp_path_factory)[0], name, n)


@pytest.mark.parametrize("n", [2, 3])
def test_refused_calls_submit_nothing(n: int, tmp_path_factory: pytest.TempPathFactory) -> None:
    j, timeline = job(n, tmp_path_factory)
    assert j.rc == 0, str(j)
    events = json.loads(timeline.read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    names = {str(e.get("args", {}).get("name", "")) for e in events} | {str(e.get("name", "")) for e in events}
    assert any("accepted" in nm for nm in names), f"the timeline has no collective names: {sorted(names)[:20]}"
    submitted = sorted(nm for nm in names if "refused." in nm)
    assert not submitted, f"refused calls were submitted: {submitted}"
