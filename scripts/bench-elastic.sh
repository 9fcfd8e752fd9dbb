#!/usr/bin/env bash
# Elastic recovery side by side (issue 28): hvdrun --horovod-compat against horovodrun
# --gloo elastic (the real Horovod 0.28.1 of scripts/horovod-peer.sh) and torchrun (c10d
# rendezvous, --max-restarts), one training loop (bench/elastic_train.py), the tools
# alternating within each round; what is measured: bench/elastic_bench.py's docstring.
#   ROUNDS (3)  TOOLS (hvdrun,horovodrun,torchrun)  PARTS (lost,added,commit)
#   KEEP (a directory: each launch's output and log kept there)  HOROVODRUN_FLAGS (e.g. --verbose)
#   HOSTS (netns as root, else local): netns = 4 ranks on 3 network-namespace hosts of
#     tests/cluster/cluster.sh (a cluster of its own, BENCH_CLUSTER_NAME (eb) on
#     BENCH_CLUSTER_NET (10.247.0), beside the cluster tests'), always torn down at the end;
#     local = 4 ranks on two names of this machine.
# A benchmark, not a test: the figures go in the closing note and the README.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
PY=$(scripts/horovod-peer.sh | tail -1)
if ! [ -x "$BUILD_DIR/cli/hvdrun" ] || ! [ -e "$BUILD_DIR/collectives/libhvdrun.so" ]; then
  scripts/build.sh --target hvdrun --target libhvdrun >/dev/null
fi
export HVDRUN_LIBRARY=$PWD/$BUILD_DIR/collectives/libhvdrun.so
# hvdrun runs the loop on Debian's python3 (the peer venv's torch, without Horovod: there
# `import horovod.torch` is hvdrun's shim) with the package from this tree.
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
# Neither launcher inherits an enclosing job.
for v in $(compgen -e); do
  case $v in HOROVOD_* | HVDRUN_RENDEZVOUS* | HVDRUN_SECRET*) unset "$v" ;; esac
done
HOSTS=${HOSTS:-$([ "$(id -u)" = 0 ] && echo netns || echo local)}
where=(--hosts "$HOSTS")
if [ "$HOSTS" = netns ]; then
  export CLUSTER_NAME=${BENCH_CLUSTER_NAME:-eb} CLUSTER_NET=${BENCH_CLUSTER_NET:-10.247.0} CLUSTER_OWN_HOSTS=1
  CDIR=$(mktemp -d /tmp/hvdrun-bench-elastic.XXXXXX)
  trap 'tests/cluster/cluster.sh down "$CDIR" >/dev/null 2>&1; rm -rf "$CDIR"' EXIT
  trap 'exit 130' INT TERM
  # h1..h3 take the ranks, h4 runs the launchers.
  tests/cluster/cluster.sh up "$CDIR" 4 >/dev/null
  # Every host's name resolving on every host, its own first (torchrun's agents, each in a
  # UTS namespace named after its host, hand out their hostname as MASTER_ADDR); this
  # machine's name resolving to the host's own address stays (CLUSTER_OWN_HOSTS: Horovod's
  # Gloo takes its address from it). Written in place: `ip netns exec` bind-mounts the file.
  for i in 1 2 3 4; do
    f=/etc/netns/hvd$CLUSTER_NAME$i/hosts
    { echo "127.0.0.1 localhost"; echo "$CLUSTER_NET.$((10 + i)) h$i"; echo "$CLUSTER_NET.$((10 + i)) $(hostname)"
      for j in 1 2 3 4; do [ "$j" = "$i" ] || echo "$CLUSTER_NET.$((10 + j)) h$j"; done; } >"$f.new"
    cat "$f.new" >"$f" && rm "$f.new"
  done
  # horovodrun runs `ssh HOST` from PATH; OpenSSH reads the passwd entry's ~/.ssh, not $HOME's.
  mkdir -p "$CDIR/bin"
  s=$CDIR/home/.ssh
  printf '#!/bin/sh\nexec /usr/bin/ssh -F %s/config -i %s/id_ed25519 -o UserKnownHostsFile=%s/known_hosts -o StrictHostKeyChecking=accept-new -o BatchMode=yes "$@"\n' \
    "$s" "$s" "$s" >"$CDIR/bin/ssh"
  chmod +x "$CDIR/bin/ssh"
  where+=(--cluster "$CDIR" --ns-prefix "hvd$CLUSTER_NAME")
fi
echo "bench-elastic: $HOSTS hosts, $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cores), $("$PY" -c 'import horovod, torch; print("Horovod", horovod.__version__, "torch", torch.__version__)')"
"$PY" bench/elastic_bench.py --hvdrun "$PWD/$BUILD_DIR/cli/hvdrun" --horovodrun "$(dirname "$PY")/horovodrun" \
  --python "$PY" --rounds "${ROUNDS:-3}" --tools "${TOOLS:-hvdrun,horovodrun,torchrun}" --parts "${PARTS:-lost,added,commit}" "${where[@]}" \
  ${KEEP:+--keep "$KEEP"} ${HOROVODRUN_FLAGS:+"--horovodrun-flags=$HOROVODRUN_FLAGS"}
echo "bench-elastic: load after $(cut -d' ' -f1-3 /proc/loadavg)"
