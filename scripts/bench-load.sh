#!/usr/bin/env bash
# Load on a running job's rendezvous server: does it slow the job's collectives, and how
# much does it grow hvdrun? Runs `hvdrun -np 2 hvdrun-bench` (allreduce, 4 KiB to 4 MiB)
# ROUNDS times without and with load, alternating; the load is started by rank 0 inside the
# job (it has the secret): IDLE authenticated idle connections plus RATE requests per second
# (set/get/add) from 8 connections. Prints the median time per size of both, their ratio, the
# achieved request rate and hvdrun's peak memory (VmHWM) in both cases.
#   scripts/bench-load.sh [IDLE=1000] [RATE=10000] [ROUNDS=5]
set -euo pipefail
cd "$(dirname "$0")/.."
B=${BUILD_DIR:-build}
IDLE=${1:-1000} RATE=${2:-10000} ROUNDS=${3:-5}
HVDRUN=$PWD/$B/cli/hvdrun
BENCH="$PWD/$B/examples/hvdrun-bench -b 4K -e 4M -f 4 -w 50 -n 1000"
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
      if [ "'"$1"'" = 1 ]; then kill -TERM $lp; wait $lp; fi
      grep VmHWM /proc/$PPID/status | sed "s/^/hvdrun /"
    else
      exec '"$BENCH"'
    fi' >"$OUT/$1.$2"
}

for r in $(seq "$ROUNDS"); do  # alternating which goes first
  if [ $((r % 2)) = 1 ]; then run 0 "$r"; run 1 "$r"; else run 1 "$r"; run 0 "$r"; fi
done

# Median time (us) per size: column 5 of hvdrun-bench's rows.
median() {  # $1: 0 or 1
  cat "$OUT/$1".* | awk '$1 ~ /^\[0\]<stdout>:/ { sub(/^\[0\]<stdout>:/, ""); if ($1 ~ /^[0-9]+$/) print $1, $5 }' |
    sort -k1,1n -k2,2g | awk '{ t[$1] = t[$1] " " $2 } END { for (s in t) { n = split(t[s], a, " "); print s, a[int((n + 1) / 2)] } }' |
    sort -k1,1n
}
join <(median 0) <(median 1) >"$OUT/table"
echo "# allreduce, 2 ranks, median of $ROUNDS rounds; load: $IDLE idle connections + $RATE requests/s"
printf "%12s %14s %14s %8s\n" "size(B)" "quiet(us)" "loaded(us)" "ratio"
awk '{ printf "%12s %14s %14s %8.3f\n", $1, $2, $3, $3 / $2 }' "$OUT/table"
awk '{ s += $3 / $2; n++ } END { printf "mean ratio: %.3f\n", s / n }' "$OUT/table"
grep -h "load: .* requests" "$OUT"/1.* | sed 's/^\[0\]<stdout>://'
echo "hvdrun VmHWM quiet: $(grep -h 'hvdrun VmHWM' "$OUT"/0.* | awk '{print $3}' | sort -n | tail -1) kB," \
  "under load: $(grep -h 'hvdrun VmHWM' "$OUT"/1.* | awk '{print $3}' | sort -n | tail -1) kB"
