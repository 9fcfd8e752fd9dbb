#!/usr/bin/env bash
# Start time of `true` on K test hosts x 2 slots over SSH (K = 1, 2, 4, 8): hvdrun (libssh,
# one agent per host), OpenSSH's `ssh host true` to each host in parallel, and Open MPI's
# mpirun over the same sshd. The hosts are network namespaces on this machine
# (tests/cluster/cluster.sh), so their sshd handshakes share its cores. Medians of REPS
# interleaved runs. Needs root. Usage: scripts/bench-ssh.sh [REPS]
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${1:-7}
scripts/build.sh --target hvdrun >/dev/null
HVD=$PWD/build/cli/hvdrun
DIR=$(mktemp -d /tmp/hvdrun-bench-ssh.XXXXXX)
trap 'tests/cluster/cluster.sh down "$DIR"; rm -rf "$DIR"' EXIT
tests/cluster/cluster.sh up "$DIR" 8
export HOME=$DIR/home
SSH="ssh -F $HOME/.ssh/config -i $HOME/.ssh/id_ed25519 -o UserKnownHostsFile=$HOME/.ssh/known_hosts -o StrictHostKeyChecking=accept-new -o BatchMode=yes"
ADDRS=($(awk '{print $2}' "$DIR/hosts.txt"))
# Every host's key known first, so no run pays for recording it.
for a in "${ADDRS[@]}"; do $SSH "$a" true; done
MPIRUN=$(command -v mpirun || true)
now() { date +%s%N; }
declare -A T
for ((rep = 0; rep < REPS; rep++)); do
  for k in 1 2 4 8; do
    hosts=$(printf '%s:2,' "${ADDRS[@]:0:k}"); hosts=${hosts%,}
    t0=$(now); $HVD -np $((2 * k)) -H "$hosts" true; t1=$(now); T[hvdrun,$k]+="$(( (t1 - t0) / 1000 )) "
    t0=$(now)
    for a in "${ADDRS[@]:0:k}"; do $SSH "$a" true & done
    wait
    t1=$(now); T[openssh,$k]+="$(( (t1 - t0) / 1000 )) "
    if [ -n "$MPIRUN" ]; then
      t0=$(now)
      if timeout 60 $MPIRUN --allow-run-as-root -np $((2 * k)) --host "$hosts" --mca plm_rsh_agent "$SSH" \
           --mca oob_tcp_if_include 10.250.0.0/24 --mca btl self,tcp --mca btl_tcp_if_include 10.250.0.0/24 \
           true </dev/null; then
        t1=$(now); T[mpirun,$k]+="$(( (t1 - t0) / 1000 )) "
      fi
    fi
  done
done
python3 - <<PY
import statistics
data = {
$(for key in "${!T[@]}"; do echo "  '$key': [${T[$key]// /,}],"; done)
}
def med(tool, k):
    v = [x for x in data.get(f"{tool},{k}", []) if x]
    return statistics.median(v) / 1000 if v else None
fmt = lambda v: f"{v:9.1f}" if v is not None else "      n/a"
print("# true on K hosts x 2 slots over sshd in network namespaces; median ms of $REPS")
print(f"{'K':>3} {'hvdrun':>9} {'openssh':>9} {'mpirun':>9} {'x openssh':>10} {'x mpirun':>9}")
for k in (1, 2, 4, 8):
    h, o, m = med("hvdrun", k), med("openssh", k), med("mpirun", k)
    print(f"{k:>3} {fmt(h)} {fmt(o)} {fmt(m)} {h / o if o else float('nan'):10.2f} {h / m if m else float('nan'):9.2f}")
PY
