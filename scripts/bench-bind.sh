#!/usr/bin/env bash
# What the default binding buys: the busbw (GB/s) of a 1 MiB float32 allreduce (hvdrun-bench,
# ITERS iterations after as many warm-ups) with NP ranks (2) under hvdrun's default
# (--bind-to auto) against --bind-to none, RUNS (5) runs of each, alternating; then the same
# oversubscribed (OVER ranks, default 2 x the cores: the default binds nothing there) with
# the default against each rank pinned to core (local rank mod cores) by taskset, the
# binding hvdrun refuses there; then, with BUSY (default: one per core) busy
# loops of another program running unbound, the default against none at NP ranks.
# Prints every run's figure and each set's min/median/max. The machine should be quiet
# (the load average is printed before and after): on a shared one the spread says more
# about the neighbours than about binding.
# Usage: scripts/bench-bind.sh   (RUNS=5 NP=2 OVER=... BUSY=... ITERS=200 BUILD_DIR=build)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${BUILD_DIR:-build}
RUNS=${RUNS:-5}
NP=${NP:-2}
NCPU=$(nproc)
OVER=${OVER:-$((2 * NCPU))}
BUSY=${BUSY:-$NCPU}
ITERS=${ITERS:-200}
[ -x "$B/cli/hvdrun" ] && [ -x "$B/examples/hvdrun-bench" ] ||
  { echo "build hvdrun and hvdrun-bench first (HVDRUN_BUILD_BENCH=ON)" >&2; exit 1; }
busbw() {  # np, then hvdrun flags ("pin": taskset each rank to a core instead)
  local np=$1 pin=()
  shift
  if [ "${1:-}" = pin ]; then
    pin=(sh -c 'exec taskset -c $((HOROVOD_LOCAL_RANK % '"$NCPU"')) "$0" "$@"')
    set -- --bind-to none
  fi
  "$B"/cli/hvdrun -np "$np" "$@" "${pin[@]}" "$B"/examples/hvdrun-bench -b 1M -e 1M -w "$ITERS" -n "$ITERS" |
    awk -F: '/^\[0\]<stdout>: +[0-9]/ {split($2, f, " "); print f[7]}'
}
# Sets A and B in turn, RUNS times; "label: runs | min median max" for each.
pair() {  # label_a, label_b, np, flags_a (one word or ""), flags_b
  local la=$1 lb=$2 np=$3 fa=$4 fb=$5 a=() b=()
  for ((i = 0; i < RUNS; i++)); do
    # shellcheck disable=SC2086
    a+=("$(busbw "$np" $fa)")
    # shellcheck disable=SC2086
    b+=("$(busbw "$np" $fb)")
  done
  for s in "$la:${a[*]}" "$lb:${b[*]}"; do
    python3 -c 'import statistics, sys
label, runs = sys.argv[1].rsplit(":", 1)
v = [float(x) for x in runs.split()]
print(f"  {label:<34} {runs:<40} min {min(v):.2f} median {statistics.median(v):.2f} max {max(v):.2f}")' "$s"
  done
}
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg); $NCPU cores; busbw GB/s, 1 MiB allreduce"
echo "$NP ranks:"
pair "default (auto: $("$B"/cli/hvdrun -np "$NP" --dry-run true | head -1 | sed 's/.*"bind":"\([^"]*\)".*/\1/'))" \
  "--bind-to none" "$NP" "" "--bind-to none"
echo "$OVER ranks (oversubscribed):"
pair "default (auto: binds nothing)" "pinned by taskset (rank % cores)" "$OVER" "" pin
echo "$NP ranks, $BUSY unbound busy loops beside:"
pids=()
for ((i = 0; i < BUSY; i++)); do
  sh -c 'while :; do :; done' &
  pids+=($!)
done
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
pair "default (auto)" "--bind-to none" "$NP" "" "--bind-to none"
kill "${pids[@]}" 2>/dev/null || true
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
