"""Shared fixtures: the hvdrun executable and a job runner with deadlines.

The test script (scripts/test-python.sh) runs this suite once per interpreter against an
installed hvdrun: HVDRUN_BIN names its executable (default: the build tree's), and the
hvdrun package is imported as that installation provides it. Every job has a deadline:
hvdrun's --start-timeout, HVDRUN_TIMEOUT for each collective, and the subprocess time-out."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional

import pytest

REPO = Path(__file__).resolve().parents[2]
WORKERS = Path(__file__).resolve().parent / "workers"


def hvdrun_bin() -> str:
    return os.environ.get("HVDRUN_BIN") or str(REPO / "build" / "cli" / "hvdrun")


class Job:
    def __init__(self, proc: subprocess.CompletedProcess) -> None:
        self.rc = proc.returncode
        self.out = proc.stdout
        self.err = proc.stderr

    def checks(self) -> Dict[str, List[str]]:
        """'CHECK <name> OK|FAIL <why>' lines, by name: the verdicts of every rank."""
        out: Dict[str, List[str]] = {}
        for line in self.out.splitlines():
            body = line.split(":", 1)[1] if line.startswith("[") else line
            if body.startswith("CHECK "):
                parts = body.split(" ", 2)
                out.setdefault(parts[1], []).append(parts[2] if len(parts) > 2 else "")
        return out

    def __str__(self) -> str:
        return f"rc={self.rc}\n--- stdout\n{self.out[-6000:]}\n--- stderr\n{self.err[-6000:]}"


def run_job(np: int, args: List[str], timeout: float = 120, env: Optional[Dict[str, str]] = None,
            hvdrun_args: Optional[List[str]] = None, python: Optional[str] = None) -> Job:
    e = dict(os.environ)
    e.setdefault("HVDRUN_TIMEOUT", "40")
    # The workers' helpers (checks.py) importable; the hvdrun package as installed.
    e["PYTHONPATH"] = os.pathsep.join(p for p in (str(WORKERS), e.get("PYTHONPATH", "")) if p)
    e.update(env or {})
    cmd = [hvdrun_bin(), "-np", str(np), "--start-timeout", "60"] + (hvdrun_args or []) + \
          [python or sys.executable] + args
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=e, cwd=str(REPO))
    except subprocess.TimeoutExpired as t:
        raise AssertionError(f"{cmd} did not finish within {timeout} s\n{t.stdout}\n{t.stderr}")
    return Job(p)


def run_python(code: str, timeout: float = 60, env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
    """One plain process, outside any hvdrun job."""
    e = {k: v for k, v in os.environ.items() if not k.startswith(("HVDRUN_RENDEZVOUS", "HVDRUN_SECRET", "HOROVOD_"))}
    e.update(env or {})
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=e,
                          cwd=str(REPO))


def assert_checks(job: Job, name: str, nranks: int) -> None:
    verdicts = job.checks().get(name)
    assert verdicts is not None, f"check {name} did not run\n{job}"
    assert len(verdicts) == nranks and all(v == "OK" for v in verdicts), f"check {name}: {verdicts}\n{job}"


@pytest.fixture(scope="session")
def torch_available() -> bool:
    try:
        import torch  # noqa: F401
        return True
    except ImportError:
        return False


def engine_missing() -> Optional[str]:
    """hvdrun.torch needs libhvdrun's asynchronous engine (named operations and handles)."""
    from hvdrun import _capi
    if _capi.has("hvd_allreduce_async"):
        return None
    return f"{_capi.library_path} has no asynchronous engine (hvd_allreduce_async): issue 11 not yet in this build"
