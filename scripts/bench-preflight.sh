#!/usr/bin/env bash
# The pre-flight check's cost: `hvdrun -np 16 -H <8 hosts>:2 python3 -c pass` with the check
# and with --no-preflight, alternated in pairs (the first of a pair alternates too), on 8
# network-namespace hosts over SSH (tests/cluster/cluster.sh, a cluster of its own: the
# cluster tests' may run beside it). Prints the medians and the median of the pairs'
# ratios. Needs root. Usage: scripts/bench-preflight.sh [PAIRS] [HVDRUN]
set -euo pipefail
cd "$(dirname "$0")/.."
PAIRS=${1:-30}
HVD=${2:-$PWD/build/cli/hvdrun}
export CLUSTER_NAME=pf CLUSTER_NET=10.253.0
DIR=$(mktemp -d /tmp/hvdrun-bench-preflight.XXXXXX)
trap 'tests/cluster/cluster.sh down "$DIR"; rm -rf "$DIR"' EXIT
tests/cluster/cluster.sh up "$DIR" 8 >/dev/null
export HOME=$DIR/home
hosts=$(awk '{printf "%s%s:2", sep, $2; sep=","}' "$DIR/hosts.txt")
"$HVD" -np 16 -H "$hosts" python3 -c pass  # every host's key known first
python3 - "$PAIRS" "$HVD" "$hosts" <<'PY'
import os, statistics, sys, time
pairs, hvd, hosts = int(sys.argv[1]), sys.argv[2], sys.argv[3]
base = [hvd, "-np", "16", "-H", hosts]
cmds = {"check": base + ["python3", "-c", "pass"], "none": base + ["--no-preflight", "python3", "-c", "pass"]}
def run(cmd):
    t0 = time.perf_counter()
    pid = os.posix_spawn(cmd[0], cmd, os.environ)
    _, st, _ = os.wait4(pid, 0)
    assert st == 0, (cmd, st)
    return time.perf_counter() - t0
t = {"check": [], "none": []}
for i in range(pairs):
    for k in (("check", "none") if i % 2 == 0 else ("none", "check")):
        t[k].append(run(cmds[k]))
ratios = [a / b for a, b in zip(t["check"], t["none"])]
print(f"{pairs} pairs: with the check {statistics.median(t['check'])*1e3:.0f} ms, --no-preflight "
      f"{statistics.median(t['none'])*1e3:.0f} ms (medians); median pair ratio {statistics.median(ratios):.3f}")
PY
