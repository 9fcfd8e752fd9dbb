# Copied as conftest.py next to Horovod's tests by scripts/test-horovod-suite.sh: each rank
# writes its own verdict of the one test it ran to $HVDRUN_SUITE_OUT/rank-<HOROVOD_RANK>
# ("passed", "failed <reason>" or "skipped <reason>", one line).
import os

_verdict = {}


def _reason(report):
    if report.skipped and isinstance(report.longrepr, tuple):
        return report.longrepr[2]
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr)
    return " ".join(text.split())[:300]


def pytest_runtest_logreport(report):
    v = _verdict.setdefault(report.nodeid, ["passed", ""])
    if report.failed and v[0] != "failed":
        v[:] = ["failed", f"{report.when}: {_reason(report)}"]
    elif report.skipped and v[0] == "passed":
        v[:] = ["skipped", _reason(report)]


def pytest_sessionfinish(session, exitstatus):
    out = os.environ.get("HVDRUN_SUITE_OUT")
    if not out:
        return
    lines = [f"{v[0]} {v[1]}".strip() for v in _verdict.values()] or [f"failed pytest ran nothing (exit {int(exitstatus)})"]
    with open(os.path.join(out, "rank-" + os.environ.get("HOROVOD_RANK", "x")), "w") as f:
        f.write(lines[0] + "\n")
