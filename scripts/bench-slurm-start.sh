#!/usr/bin/env bash
# Start time inside one Slurm allocation of 4 nodes x 2 tasks: `hvdrun true` (8 ranks, one
# agent per node through srun) against `srun -n8 true` and Open MPI's `mpirun -np 8 true`
# (its daemons also started with srun). The allocation is on the test cluster of
# tests/slurm/slurm-cluster.sh (every node on this machine, in private namespaces), so
# these are the launchers' own costs, not a network's.
#   scripts/bench-slurm-start.sh [REPEATS]      (root; build/ built; Debian's slurm-wlm)
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-10}
hvdrun=$PWD/${BUILD_DIR:-build}/cli/hvdrun
[ -x "$hvdrun" ] || { echo "bench-slurm-start: build hvdrun first (scripts/build.sh)" >&2; exit 2; }
dir=$(mktemp -d /tmp/hvdrun-slurm-bench.XXXXXX)
trap 'tests/slurm/slurm-cluster.sh down "$dir"; rm -rf "$dir"' EXIT
tests/slurm/slurm-cluster.sh up "$dir" 4
cat > "$dir/inside.sh" <<INSIDE
#!/bin/sh
# Runs inside the allocation: each command \$reps times, one time in ms per line.
t() { s=\$(date +%s%N); "\$@" >/dev/null 2>&1 || echo "failed: \$*" >&2; e=\$(date +%s%N); echo \$(( (e - s) / 1000000 )); }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
for i in \$(seq 1 $reps); do
  echo "hvdrun \$(t $hvdrun true)"
  echo "srun \$(t srun -n8 true)"
  echo "mpirun \$(t mpirun -np 8 true)"
done
INSIDE
chmod +x "$dir/inside.sh"
tests/slurm/slurm-cluster.sh exec "$dir" salloc -N4 --ntasks-per-node=2 "$dir/inside.sh" > "$dir/times" 2> "$dir/err" || true
grep -v '^salloc:' "$dir/err" | sort | uniq -c | head -5 >&2 || true
median() { sort -n | awk '{a[NR]=$1} END {if (NR == 0) print "n/a"; else print (NR % 2 ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2)}'; }
echo "start time, median of $reps, 4 nodes x 2 ranks in one allocation (ms):"
for cmd in hvdrun srun mpirun; do
  printf '  %-28s %s\n' "$(case $cmd in hvdrun) echo 'hvdrun true';; srun) echo 'srun -n8 true';; mpirun) echo 'mpirun -np 8 true';; esac)" \
    "$(awk -v c=$cmd '$1 == c {print $2}' "$dir/times" | median)"
done
