#!/usr/bin/env bash
# float32 sum allreduce bus bandwidth, 4 KiB .. 256 MiB, on this host with 2 and 4 ranks, the
# tools alternating in each round: hvdrun over shared memory (the default between ranks of
# one host), hvdrun over loopback TCP (HVDRUN_SHM=0), Open MPI's MPI_Allreduce over shared
# memory (--mca btl vader,self: vader with its single-copy CMA) and over TCP, and
# torch.distributed gloo (Debian's python3-torch; GLOO=0 skips it). Every tool's buffers are
# written before timing. Prints busbw per size with hvdrun-shm / vader ratios and the 4 KiB
# latencies, then (as root, CLUSTER=0 skips it) 2 test-cluster hosts x 2 ranks
# (tests/cluster/cluster.sh, under the cluster lock) hierarchical vs flat at 64 MiB, once
# per entry of CLUSTER_RATES (default "unlimited 10gbit 1gbit"): each host's link as veth
# gives it (the kernel copies at memory speed on the same CPUs: the wire is not what limits)
# and shaped with tc's token bucket to a network slower than memory, as between real hosts.
# The test hosts share this machine's 2 cores, about one core's memory bandwidth each (some
# 10 GB/s); 1 Gbit/s (0.125 GB/s) is some 80 times below that, as 25 Gbit/s Ethernet
# (3 GB/s) is below a server's 200 GB/s: there fewer bytes on the wire is what a hierarchy
# buys, while unshaped or at 10 Gbit/s both rings are bound by the 2 shared cores. Then it
# draws the busbw-vs-size curves into $PNG (default docs/bench-allreduce.png; Debian's
# python3-matplotlib). Needs libopenmpi-dev and python3-torch (scripts/install-deps.sh).
# The machine should be quiet: the script prints the load average before and after.
set -euo pipefail
cd "$(dirname "$0")/.."
MIN=${MIN:-4096}
MAX=${MAX:-268435456}
ROUNDS=${ROUNDS:-2}
RANKS=${RANKS:-2 4}
GLOO=${GLOO:-1}
CLUSTER=${CLUSTER:-1}
CLUSTER_RATES=${CLUSTER_RATES:-unlimited 10gbit 1gbit}
PNG=${PNG:-docs/bench-allreduce.png}
export BUILD_DIR=${BUILD_DIR:-build}
B=$BUILD_DIR
scripts/build.sh >/dev/null
OUT=$(mktemp -d)
CDIR=
cleanup() {
  if [ -n "$CDIR" ]; then tests/cluster/cluster.sh down "$CDIR" >/dev/null 2>&1 || true; rm -rf "$CDIR"; fi
  rm -rf "$OUT"
}
trap cleanup EXIT
mpicc -O2 -o "$OUT/mpi_allreduce" bench/mpi_allreduce.c
export OMPI_MCA_plm_rsh_agent=
echo "load before: $(uptime)"

# hvdrun-bench times each size as bench/mpi_allreduce.c does (-n auto: 200, 20 or 5
# iterations by size, after as many untimed ones, as OSU's benchmarks warm up: the first
# milliseconds after start-up run slower in both tools), all sizes in one process. mpirun
# binds each rank to a core by default (local rank modulo the cores when oversubscribed, as
# here); hvdrun does not bind, so the script binds its ranks the same way with taskset
# (BIND=0: not).
NCPU=$(nproc)
BIND=${BIND:-1}
hvdrun_bench() {  # np, then env assignments
  local np=$1
  shift
  local bind=()
  [ "$BIND" = 1 ] && bind=(sh -c 'exec taskset -c $((HOROVOD_LOCAL_RANK % '"$NCPU"')) "$0" "$@"')
  env "$@" "$B"/cli/hvdrun -np "$np" "${bind[@]}" "$B"/examples/hvdrun-bench -b "$MIN" -e "$MAX" -f 4 -n auto |
    awk -F: '/^\[0\]<stdout>: +[0-9]/ {split($2, f, " "); printf "%s %s %s\n", f[1], f[7], f[5]}'
}

for np in $RANKS; do
  MPIRUN=(mpirun --allow-run-as-root --oversubscribe -np "$np")
  for round in $(seq "$ROUNDS"); do
    hvdrun_bench "$np" HVDRUN_SHM=1 >> "$OUT/hvdrun_shm.$np"
    timeout 600 "${MPIRUN[@]}" --mca btl vader,self "$OUT/mpi_allreduce" "$MIN" "$MAX" >> "$OUT/ompi_vader.$np"
    hvdrun_bench "$np" HVDRUN_SHM=0 >> "$OUT/hvdrun_tcp.$np"
    timeout 600 "${MPIRUN[@]}" --mca btl tcp,self "$OUT/mpi_allreduce" "$MIN" "$MAX" >> "$OUT/ompi_tcp.$np"
    if [ "$GLOO" = 1 ]; then
      "$B"/cli/hvdrun -np "$np" /usr/bin/python3 bench/torch_gloo_allreduce.py "$MIN" "$MAX" |
        sed -n 's/^\[0\]<stdout>://p' >> "$OUT/gloo.$np"
    fi
  done
done

# Two test-cluster hosts (network namespaces of this machine), 2 ranks each, 64 MiB.
if [ "$CLUSTER" = 1 ] && [ "$(id -u)" = 0 ]; then
  exec 8>/tmp/hvdrun-cluster.lock
  flock 8
  CDIR=$(mktemp -d)
  tests/cluster/cluster.sh up "$CDIR" 2 >/dev/null
  for rate in $CLUSTER_RATES; do
    for i in 1 2; do
      ip netns exec hvdh$i tc qdisc del dev eth0 root 2>/dev/null || true
      [ "$rate" = unlimited ] || ip netns exec hvdh$i tc qdisc add dev eth0 root tbf rate "$rate" burst 4mb latency 100ms
    done
    for round in $(seq "$ROUNDS"); do
      for h in 1 0; do
        HOME=$CDIR/home HVDRUN_HIERARCHICAL_ALLREDUCE=$h "$B"/cli/hvdrun -H h1:2,h2:2 \
          "$PWD/$B/examples/hvdrun-bench" -b 64M -e 64M -w 3 -n 10 |
          awk -F: -v h=$h '/^\[0\]<stdout>: +[0-9]/ {split($2, f, " "); printf "%s %s %s\n", f[1], f[7], f[5]}' \
          >> "$OUT/cluster_hier$h.$rate" ||
          echo "bench-allreduce: the 2-host run (hierarchical=$h, $rate, round $round) failed; the tables below lack it" >&2
      done
    done
  done
  tests/cluster/cluster.sh down "$CDIR" >/dev/null
  rm -rf "$CDIR"
  CDIR=
  flock -u 8
fi
echo "load after: $(uptime)"

/usr/bin/python3 - "$OUT" "$PNG" "$RANKS" "$CLUSTER_RATES" <<'PY'
import collections, os, statistics, sys
d, png, ranks = sys.argv[1], sys.argv[2], [int(x) for x in sys.argv[3].split()]
tools = [("hvdrun_shm", "hvdrun shm"), ("ompi_vader", "ompi vader"), ("hvdrun_tcp", "hvdrun tcp"),
         ("ompi_tcp", "ompi tcp"), ("gloo", "gloo")]

def load(path):
    bw, lat = collections.defaultdict(list), collections.defaultdict(list)
    if os.path.exists(path):
        for line in open(path):
            f = line.split()
            if len(f) >= 3:
                bw[int(float(f[0]))].append(float(f[1]))
                lat[int(float(f[0]))].append(float(f[2]))
    return ({s: statistics.median(v) for s, v in bw.items()}, {s: statistics.median(v) for s, v in lat.items()})

nan = float("nan")
curves = {}
for np_ in ranks:
    data = {t: load(os.path.join(d, f"{t}.{np_}")) for t, _ in tools}
    curves[np_] = data
    sizes = sorted(data["hvdrun_shm"][0])
    print(f"\n{np_} ranks on one host, float32 sum, busbw GB/s (median over rounds)")
    print(f"{'size':>10} " + " ".join(f"{name:>11}" for _, name in tools) + f" {'shm/vader':>10}")
    for s in sizes:
        m = {t: data[t][0].get(s, nan) for t, _ in tools}
        print(f"{s:>10} " + " ".join(f"{m[t]:11.3f}" for t, _ in tools) + f" {m['hvdrun_shm'] / m['ompi_vader']:10.2f}")
    s = min(sizes)
    l = {t: data[t][1].get(s, nan) for t, _ in tools}
    print(f"latency at {s} B (us): " + ", ".join(f"{name} {l[t]:.1f}" for t, name in tools) +
          f"; hvdrun shm / vader {l['hvdrun_shm'] / l['ompi_vader']:.2f}")

for rate in sys.argv[4].split():
    h1 = load(os.path.join(d, f"cluster_hier1.{rate}"))[0]
    h0 = load(os.path.join(d, f"cluster_hier0.{rate}"))[0]
    if h1 and h0:
        s = max(h1)
        print(f"\n2 test-cluster hosts x 2 ranks, links {rate}, {s} B: hierarchical {h1[s]:.3f} GB/s busbw, "
              f"flat ring {h0[s]:.3f} GB/s: {h1[s] / h0[s]:.2f}x")

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    print("no matplotlib (apt-get install python3-matplotlib): no plot")
    sys.exit(0)
fig, axes = plt.subplots(1, len(ranks), figsize=(6 * len(ranks), 4.5), squeeze=False)
for ax, np_ in zip(axes[0], ranks):
    for t, name in tools:
        bw = curves[np_][t][0]
        if bw:
            xs = sorted(bw)
            ax.plot(xs, [bw[x] for x in xs], marker="o", label=name)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("busbw (GB/s)")
    ax.set_title(f"allreduce float32, {np_} ranks on one host")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
fig.tight_layout()
os.makedirs(os.path.dirname(png) or ".", exist_ok=True)
fig.savefig(png, dpi=100)
print(f"plot: {png}")
PY
