#!/usr/bin/env bash
# Launch time of `hvdrun -np N true` against a bare fork/exec/wait of N processes and Open
# MPI's `mpirun --oversubscribe -np N true`, interleaved in one run; prints medians and ratios.
# Usage: scripts/bench-launch.sh [REPS]   (builds first; needs openmpi-bin for the mpirun column)
#        BASE=OTHER_HVDRUN scripts/bench-launch.sh [PAIRS] [N]: this build's `hvdrun -np N true`
#        (32) against OTHER_HVDRUN's, in alternating pairs (load on a shared host falls on
#        both alike); the medians, and the median of the pairs' wall and CPU ratios.
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${1:-21}
scripts/build.sh >/dev/null
HVD=build/cli/hvdrun
if [ -n "${BASE:-}" ]; then
  exec python3 - "$HVD" "$BASE" "$REPS" "${2:-32}" <<'PY'
import os, statistics, sys, time
a, b, pairs, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
def run(exe):
    t0 = time.perf_counter()
    pid = os.posix_spawn(exe, [exe, "-np", n, "true"], os.environ)
    _, st, ru = os.wait4(pid, 0)  # CPU: hvdrun and everything it waited for
    assert st == 0, (exe, st)
    return time.perf_counter() - t0, ru.ru_utime + ru.ru_stime
r = {a: [], b: []}
for i in range(pairs):
    for exe in ((a, b) if i % 2 == 0 else (b, a)):
        r[exe].append(run(exe))
med = lambda v: statistics.median(v)
print(f"{pairs} pairs, -np {n} true: wall {med([w for w, _ in r[a]])*1e3:.1f} ms against "
      f"{med([w for w, _ in r[b]])*1e3:.1f} ms; median pair ratio wall "
      f"{med([x[0] / y[0] for x, y in zip(r[a], r[b])]):.3f}, CPU {med([x[1] / y[1] for x, y in zip(r[a], r[b])]):.3f}")
PY
fi
BASE=build/bench/hvdrun_spawn_baseline
MPIRUN=$(command -v mpirun || true)
MPI_FLAGS=(--oversubscribe --allow-run-as-root -np)
export OMPI_MCA_btl=self,tcp
now() { date +%s%N; }
declare -A T
declare -A HANGS
for ((rep = 0; rep < REPS; rep++)); do
  for n in 1 16 64; do
    t0=$(now); $BASE $n true; t1=$(now); T[bare,$n]+="$(( (t1 - t0) / 1000 )) "
    t0=$(now); $HVD -np $n true; t1=$(now); T[hvdrun,$n]+="$(( (t1 - t0) / 1000 )) "
    if [ -n "$MPIRUN" ]; then
      # Open MPI 4.1 here sometimes hangs at -np 64 on 2 cores: such runs are cut at 10 s
      # and counted, not timed.
      t0=$(now)
      if timeout 10 $MPIRUN "${MPI_FLAGS[@]}" $n true </dev/null; then
        t1=$(now); T[mpirun,$n]+="$(( (t1 - t0) / 1000 )) "
      else
        HANGS[$n]=$(( ${HANGS[$n]:-0} + 1 ))
      fi
    fi
  done
done
python3 - "$REPS" <<PY
import statistics, sys
data = {
$(for k in "${!T[@]}"; do echo "  '$k': [${T[$k]// /,}],"; done)
}
def med(tool, n):
    v = data.get(f"{tool},{n}")
    return statistics.median(v) / 1000 if v else None
print(f"launch time, median of {sys.argv[1]} runs (ms)")
print(f"{'N':>4} {'bare':>8} {'hvdrun':>8} {'mpirun':>8} {'hvd/bare':>9} {'hvd/mpirun':>11}")
for n in (1, 16, 64):
    b, h, m = med('bare', n), med('hvdrun', n), med('mpirun', n)
    ms = f"{m:8.1f}" if m else f"{'n/a':>8}"
    rm = f"{h/m:11.2f}" if m else f"{'n/a':>11}"
    print(f"{n:>4} {b:8.1f} {h:8.1f} {ms} {h/b:9.2f} {rm}")
hangs = {$(for k in "${!HANGS[@]}"; do echo -n "$k: ${HANGS[$k]}, "; done)}
if hangs:
    print("mpirun runs that hung (cut at 10 s, left out of its median):", hangs)
PY
