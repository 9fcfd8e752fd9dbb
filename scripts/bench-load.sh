#!/usr/bin/env bash
# Load on a running job's rendezvous server: does it slow the job's collectives, and how
# much does it grow hvdrun? Runs `hvdrun -np 2 hvdrun-bench` (allreduce, 4 KiB to 4 MiB)
# ROUNDS times without and with load, alternating; the load is started by rank 0 inside the
# job (it has the secret): IDLE authenticated idle connections plus RATE requests per second
# (set/get/add) from 8 connections. Prints the median time per size of both, their ratio, the
# achieved request rate and hvdrun's peak memory (VmHWM) in both cases.
# The control, "bystander": the same load against another job's hvdrun on this machine while
# the measured job runs quiet. The load generator and the server it loads take the same CPU
# in both cases, so loaded / bystander is what serving the load inside the job's own hvdrun
# costs its collectives beyond sharing the cores (on a small machine the generator alone,
# running beside the ranks, slows them).
#   scripts/bench-load.sh [IDLE=1000] [RATE=10000] [ROUNDS=5]
set -euo pipefail
cd "$(dirname "$0")/.."
B=${BUILD_DIR:-build}
IDLE=${1:-1000} RATE=${2:-10000} ROUNDS=${3:-5}
HVDRUN=$PWD/$B/cli/hvdrun
BENCH="$PWD/$B/examples/hvdrun-bench -b 4K -e 4M -f 4 -w 20 -n 300"
LOAD=$PWD/$B/bench/hvdrun_rendezvous_load
OUT=$(mktemp -d /tmp/hvdrun-bench-load.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
ulimit -n "$(ulimit -Hn)"

run() {  # $1: 0 = quiet, 1 = under load; output to $OUT/$1.$2
  "$HVDRUN" -np 2 sh -c '
    if [ "$RANK" = 0 ]; then
      if [ "'"$1"'" = 1 ]; then
        "'"$LOAD"'" '"$IDLE $RATE"' 8 600 $PPID & lp=$!
      fi
      sleep 3   # under load: the idle connections are open and the requests flowing
      '"$BENCH"'
      if [ "'"$1"'" = 1 ]; then
        echo "generator: $(awk "{printf \"%.2f\", (\$14 + \$15) / $(getconf CLK_TCK)}" /proc/$lp/stat) s of CPU in $(ps -o etimes= -p $lp | tr -d " ") s"
        kill -TERM $lp; wait $lp
      fi
      grep VmHWM /proc/$PPID/status | sed "s/^/hvdrun /"
    else
      exec '"$BENCH"'
    fi' >"$OUT/$1.$2"
}

# The quiet job beside a bystander job that takes the load.
bystander() {  # $1: round
  "$HVDRUN" -np 1 sh -c 'exec "'"$LOAD"'" '"$IDLE $RATE"' 8 600 $PPID' >"$OUT/by.$1" 2>&1 &
  local bp=$!
  run 0 "$1" && mv "$OUT/0.$1" "$OUT/2.$1"
  local rc=$?
  kill -TERM "$bp"
  wait "$bp" || true
  return $rc
}

failed=0
for r in $(seq "$ROUNDS"); do  # rotating which goes first
  case $((r % 3)) in 1) order="0 1 2" ;; 2) order="1 2 0" ;; *) order="2 0 1" ;; esac
  for kind in $order; do
    if [ "$kind" = 2 ]; then bystander "$r"; else run "$kind" "$r"; fi ||
      { echo "bench-load.sh: round $r ($kind) failed"; failed=$((failed + 1)); }
  done
done

# Median time (us) per size of each kind: column 5 of hvdrun-bench's rows (rank 0's).
awk -v rounds="$ROUNDS" '
  FNR == 1 { np = split(FILENAME, parts, "/"); kind = substr(parts[np], 1, 1) }
  { line = $0; sub(/^\[0\]<stdout>:/, "", line); n = split(line, f, " ") }
  n >= 5 && f[1] ~ /^[0-9]+$/ && f[2] ~ /^[0-9]+$/ { t[kind, f[1]] = t[kind, f[1]] " " f[5]; sizes[f[1]] = 1 }
  function median(list,   a, m, i, j, x) {
    m = split(list, a, " ")
    for (i = 2; i <= m; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] + 0 > x + 0; j--) a[j + 1] = a[j]; a[j + 1] = x }
    return a[int((m + 1) / 2)]
  }
  END {
    printf "# allreduce, 2 ranks, median of %d rounds\n", rounds
    printf "%12s %12s %12s %14s %8s %16s\n", "size(B)", "quiet(us)", "loaded(us)", "bystander(us)", "ratio", "loaded/bystander"
    ns = 0; for (s in sizes) order[++ns] = s + 0
    for (i = 2; i <= ns; i++) { x = order[i]; for (j = i - 1; j >= 1 && order[j] > x; j--) order[j + 1] = order[j]; order[j + 1] = x }
    for (i = 1; i <= ns; i++) {
      q = median(t[0, order[i]]); l = median(t[1, order[i]]); b = median(t[2, order[i]])
      printf "%12d %12.1f %12.1f %14.1f %8.3f %16.3f\n", order[i], q, l, b, (q > 0 ? l / q : 0), (b > 0 ? l / b : 0)
    }
  }' "$OUT"/0.* "$OUT"/1.* "$OUT"/2.*
echo "# load: $IDLE idle connections + $RATE requests/s, per loaded round:"
grep -h "load: .* requests" "$OUT"/1.* | sed 's/^\[0\]<stdout>://'
echo "# the load generator itself (on this host, sharing its cores with the ranks):"
grep -h "generator: " "$OUT"/1.* | sed 's/^\[0\]<stdout>://'
echo "# the bystander's load (against its own hvdrun), per round:"
grep -h "load: .* requests" "$OUT"/by.* | sed 's/^\[0\]<stdout>://'
echo "hvdrun VmHWM quiet: $(grep -h 'hvdrun VmHWM' "$OUT"/0.* | awk '{print $3}' | sort -n | tail -1) kB," \
  "under load: $(grep -h 'hvdrun VmHWM' "$OUT"/1.* | awk '{print $3}' | sort -n | tail -1) kB"
[ "$failed" = 0 ]
