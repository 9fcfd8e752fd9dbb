# Copied as conftest.py next to Horovod's tests by scripts/test-horovod-suite.sh: each rank
# writes its own verdict of the one test it ran to $HVDRUN_SUITE_OUT/rank-<HOROVOD_RANK>
# ("passed", "failed <reason>" or "skipped <reason>", one line), anew after each phase
# (setup, call, teardown): a rank the job ends early (another rank failed) leaves its
# verdict so far.
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
    if v[0] == "passed" and report.when != "teardown":
        _write(f"failed the job ended it after its {report.when}")
    else:
        _write(f"{v[0]} {v[1]}".strip())


def pytest_sessionfinish(session, exitstatus):
    if not _verdict:
        _write(f"failed pytest ran nothing (exit {int(exitstatus)})")


def _write(line):
    out = os.environ.get("HVDRUN_SUITE_OUT")
    if out:
        path = os.path.join(out, "rank-" + os.environ.get("HOROVOD_RANK", "x"))
        with open(path + ".tmp", "w") as f:
            f.write(line + "\n")
        os.replace(path + ".tmp", path)
