"""Helpers of scripts/test-horovod-suite.sh.

  list FILE...            the unittest test ids (file::Class::test) the files hold
  stdlib-only FILE        rewrites FILE (Horovod's test/utils/common.py) without its imports of
                          what is not Python's own (cloudpickle, mock, horovod.runner: Horovod's
                          launcher's test helpers, which the torch tests do not call)
  verdict DIR NP RC       one job's verdict from its ranks' files (see horovod_suite_conftest.py)
  summary DIR LABEL [TORCH]  the counts and names of one configuration's verdicts (DIR ends in
                          -np<N>: a test in UPSTREAM that fails there counts as upstream; so does
                          one in UPSTREAM_WITH_TORCH when the interpreter's torch version TORCH
                          is that recent)
"""
import ast
import os
import sys


def list_tests(files):
    for path in files:
        tree = ast.parse(open(path).read())
        for cls in tree.body:
            if isinstance(cls, ast.ClassDef):
                for fn in cls.body:
                    if isinstance(fn, ast.FunctionDef) and fn.name.startswith("test"):
                        print(f"{os.path.basename(path)}::{cls.name}::{fn.name}")


def stdlib_only(path):
    src = open(path).read()
    lines = src.splitlines(keepends=True)
    for node in reversed(ast.parse(src).body):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if not all(m.split(".")[0] in sys.stdlib_module_names for m in mods):
                del lines[node.lineno - 1:node.end_lineno]
    open(path, "w").write("".join(lines))


def verdict(out_dir, np_, rc):
    if rc in (124, 137):
        return "hung", "killed after the per-test timeout"
    ranks = []
    for r in range(np_):
        p = os.path.join(out_dir, f"rank-{r}")
        if not os.path.exists(p):
            return "failed", f"rank {r} reported nothing (job exit {rc})"
        kind, _, reason = open(p).read().strip().partition(" ")
        ranks.append((kind, reason, r))
    for kind, reason, r in ranks:
        if kind == "failed":
            return "failed", f"rank {r}: {reason}"
    kinds = {k for k, _, _ in ranks}
    if kinds == {"passed"}:
        return ("passed", "") if rc == 0 else ("failed", f"every rank passed but the job exited {rc}")
    if kinds == {"skipped"}:
        return "skipped", ranks[0][1]
    return "failed", "ranks disagree: " + ", ".join(f"rank {r} {k}" for k, _, r in ranks)


# Tests that fail or hang on Horovod 0.28.1's own CPU/Gloo build too (run there with its
# horovodrun --gloo on this machine's Debian torch, same rank count): the test's name, the
# fewest ranks from which this holds, and why. One of these that fails or hangs here counts
# as "upstream", not as a failure; one that passes counts as passed.
UPSTREAM = {
    "test_horovod_allreduce_prescale": (3, "float16 compared at threshold 0 when size <= 3: the expected "
                                        "3*m, computed in float32, is no float16 value"),
    "test_horovod_reducescatter_prescale": (3, "as test_horovod_allreduce_prescale (the ranks whose "
                                            "comparison fails leave; the others wait: a hang)"),
    "test_horovod_grouped_reducescatter_prescale": (3, "as test_horovod_allreduce_prescale"),
    "test_horovod_join_allgather": (3, "after the first round the unnamed allgathers of the ranks "
                                    "that did not join first are out of step: a hang"),
    "test_process_set_barrier_op": (3, "timing: an even rank that leaves the preceding allreduce later "
                                    "than rank 0 measures less than rank 0's 5 s sleep"),
    "test_global_barrier_op": (3, "timing: a rank that leaves the preceding allreduce later than rank 0 "
                               "measures less than rank 0's sleep (Horovod's own build failed it in 3 of "
                               "16 runs beside 4 busy loops, hvdrun in 1 of 8 alternating with it)"),
}


# Tests that fail with a recent torch whatever runs them, before any collective: the test's
# name, the first torch (major, minor) where this holds, the error that failure shows (any
# other failure of the test stays a failure), and why. On an older torch they run and count
# as any other test.
_MUON = ("tries every optimizer class of torch.optim on a model with 1-D parameters (biases); "
         "torch.optim.Muon (torch 2.9 on, pytorch#160213) refuses them in its constructor: "
         "'ValueError: Muon only supports 2D parameters', in plain torch without hvdrun or Horovod")
UPSTREAM_WITH_TORCH = {
    "test_broadcast_state": ((2, 9), "Muon only supports 2D parameters", _MUON),
    "test_broadcast_state_options": ((2, 9), "Muon only supports 2D parameters", _MUON),
    "test_force_allreduce": ((2, 9), "Muon only supports 2D parameters", _MUON),
}


def _torch_at_least(version, least):
    parts = version.split("+")[0].split(".")
    try:
        return (int(parts[0]), int(parts[1])) >= least
    except (IndexError, ValueError):
        return False


def _upstream_reason(name, reason, np_, torch_version):
    test = name.split("::")[-1]
    known = UPSTREAM.get(test)
    if known and np_ >= known[0]:
        return f"on Horovod's own Gloo build: {known[1]}"
    with_torch = UPSTREAM_WITH_TORCH.get(test)
    if with_torch and _torch_at_least(torch_version, with_torch[0]) and with_torch[1] in reason:
        return f"with torch {torch_version} whatever runs it: Horovod's test {with_torch[2]}"
    return None


def _np_of(res_dir):
    tail = os.path.basename(os.path.normpath(res_dir)).rpartition("-np")[2]
    return int(tail) if tail.isdigit() else 0


def summary(res_dir, label, torch_version=""):
    rows = {}
    np_ = _np_of(res_dir)
    for name in sorted(n for n in os.listdir(res_dir) if not n.endswith(".log")):
        kind, _, reason = open(os.path.join(res_dir, name)).read().strip().partition(" ")
        upstream = _upstream_reason(name, reason, np_, torch_version) if kind in ("failed", "hung") else None
        if upstream:
            kind, reason = "upstream", f"{kind} here and {upstream}"
        if kind == "skipped" and reason in ("", "Skipped"):
            reason = "skipped by the test itself (@unittest.skip in Horovod's source)"
        rows.setdefault(kind, []).append((name, reason))
    counts = ", ".join(f"{len(rows.get(k, []))} {k}" for k in ("passed", "failed", "skipped", "hung", "upstream"))
    print(f"== {label}: {counts}")
    for kind in ("failed", "hung", "upstream", "skipped"):
        for name, reason in rows.get(kind, []):
            print(f"  {kind.upper():7} {name}: {reason}")
    if rows.get("passed"):
        print("  PASSED  " + " ".join(n.split("::")[-1] for n, _ in rows["passed"]))
    return 1 if rows.get("failed") or rows.get("hung") else 0


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "list":
        list_tests(args)
    elif cmd == "stdlib-only":
        stdlib_only(args[0])
    elif cmd == "verdict":
        print(" ".join(verdict(args[0], int(args[1]), int(args[2]))).strip())
    elif cmd == "summary":
        sys.exit(summary(*args[:3]))
