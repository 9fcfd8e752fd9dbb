#!/usr/bin/env bash
# 2-rank float32 allreduce bus bandwidth, 4 KiB .. 256 MiB, in one run with the tools
# alternating: hvdrun-bench; Open MPI's MPI_Allreduce over TCP (--mca btl tcp,self) and over
# shared memory (vader); torch.distributed gloo (Debian's python3-torch). Prints busbw per
# size and hvdrun's ratios. Needs libopenmpi-dev and python3-torch (scripts/install-deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
MIN=${MIN:-4096}
MAX=${MAX:-268435456}
ROUNDS=${ROUNDS:-2}
scripts/build.sh >/dev/null
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
mpicc -O2 -o "$OUT/mpi_allreduce" bench/mpi_allreduce.c
export OMPI_MCA_plm_rsh_agent=
MPIRUN=(mpirun --allow-run-as-root --oversubscribe -np 2)
for round in $(seq "$ROUNDS"); do
  build/cli/hvdrun -np 2 build/examples/hvdrun-bench -b "$MIN" -e "$MAX" -f 4 -w 3 -n 10 |
    awk -F: '/^\[0\]<stdout>: +[0-9]/ {split($2, f, " "); printf "%s %s %s\n", f[1], f[7], f[5]}' >> "$OUT/hvdrun"
  timeout 600 "${MPIRUN[@]}" --mca btl tcp,self "$OUT/mpi_allreduce" "$MIN" "$MAX" >> "$OUT/mpi_tcp"
  timeout 600 "${MPIRUN[@]}" --mca btl vader,self "$OUT/mpi_allreduce" "$MIN" "$MAX" >> "$OUT/mpi_shm"
  build/cli/hvdrun -np 2 /usr/bin/python3 bench/torch_gloo_allreduce.py "$MIN" "$MAX" |
    sed -n 's/^\[0\]<stdout>://p' >> "$OUT/gloo"
done
python3 - "$OUT" <<'PY'
import collections, statistics, sys, os
d = sys.argv[1]
tools = ["hvdrun", "mpi_tcp", "mpi_shm", "gloo"]
bw, lat = {}, {}
for t in tools:
    bw[t], lat[t] = collections.defaultdict(list), collections.defaultdict(list)
    for line in open(os.path.join(d, t)):
        f = line.split()
        if len(f) >= 3:
            bw[t][int(float(f[0]))].append(float(f[1])); lat[t][int(float(f[0]))].append(float(f[2]))
sizes = sorted(bw["hvdrun"])
print("2 ranks, float32 sum, busbw GB/s (median over rounds); time in us for 4 KiB")
print(f"{'size':>10} {'hvdrun':>8} {'ompi-tcp':>9} {'ompi-shm':>9} {'gloo':>8} {'x tcp':>7} {'x gloo':>7}")
for s in sizes:
    m = {t: statistics.median(bw[t][s]) if bw[t].get(s) else float('nan') for t in tools}
    print(f"{s:>10} {m['hvdrun']:8.3f} {m['mpi_tcp']:9.3f} {m['mpi_shm']:9.3f} {m['gloo']:8.3f} "
          f"{m['hvdrun']/m['mpi_tcp']:7.2f} {m['hvdrun']/m['gloo']:7.2f}")
s = min(sizes)
l = {t: statistics.median(lat[t][s]) if lat[t].get(s) else float('nan') for t in tools}
print(f"latency at {s} B: hvdrun {l['hvdrun']:.1f} us, ompi-tcp {l['mpi_tcp']:.1f} us, "
      f"ompi-shm {l['mpi_shm']:.1f} us, gloo {l['gloo']:.1f} us; hvdrun/ompi-tcp {l['hvdrun']/l['mpi_tcp']:.2f}")
PY
