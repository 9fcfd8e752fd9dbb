#!/usr/bin/env bash
# A real Slurm cluster (Debian's slurm-wlm) on this machine, for tests: slurmctld and K
# `slurmd -N nI` in a private directory, all inside private PID, network, mount and UTS
# namespaces whose network holds nothing but loopback (127.0.0.1, and 192.0.2.1 on lo). No Slurm daemon or client of this
# cluster can send a packet off the machine: there is no interface to send it on.
#
#   slurm-cluster.sh up DIR K      start it (nodes n1..nK, partition main; nK also alone
#                                  in partition single), wait until every node is idle
#   slurm-cluster.sh exec DIR CMD  run CMD inside the cluster's namespaces with SLURM_CONF
#                                  set; refused (exit 99, nothing run) unless the
#                                  namespace is the one `up` made and is still alive
#   slurm-cluster.sh down DIR      end it: the namespace's init is killed, and with it
#                                  every process in it (daemons, jobs, strays)
#
# Settings (slurm.conf): AuthType=auth/none, CredType=cred/none,
# ProctrackType=proctrack/linuxproc, TaskPlugin=task/none, every address 127.0.0.1.
set -euo pipefail

conf() {
  local dir=$1 k=$2
  cat <<CFG
ClusterName=hvdtest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=6817
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
SlurmdParameters=config_overrides
ReturnToService=2
KillWait=5
MinJobAge=300
InactiveLimit=0
MessageTimeout=20
SlurmdTimeout=60
PropagateResourceLimitsExcept=ALL
CFG
  for i in $(seq 1 "$k"); do
    echo "NodeName=n$i NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((17000 + i)) CPUs=2 RealMemory=1000 State=UNKNOWN"
  done
  echo "PartitionName=main Nodes=n[1-$k] Default=YES MaxTime=INFINITE State=UP"
  echo "PartitionName=single Nodes=n$k MaxTime=INFINITE State=UP"
}

# The namespace's init (pid, as this machine sees it) and its network namespace, as `up`
# recorded them; fails unless that process still holds that namespace.
live_init() {
  local dir=$1 pid want have
  pid=$(cat "$dir/ns.pid" 2>/dev/null) || return 1
  want=$(cat "$dir/ns.net" 2>/dev/null) || return 1
  have=$(readlink "/proc/$pid/ns/net" 2>/dev/null) || return 1
  [ -n "$want" ] && [ "$have" = "$want" ] && [ "$have" != "$(readlink /proc/1/ns/net)" ] || return 1
  echo "$pid"
}

in_ns() {
  local dir=$1 pid
  shift
  pid=$(live_init "$dir") || { echo "slurm-cluster: the test cluster in $dir is not running; refusing to run a Slurm client" >&2; return 99; }
  # Checked again from inside: the command runs only in the cluster's own network namespace.
  nsenter -t "$pid" -p -n -m -u --wd="$PWD" env SLURM_CONF="$dir/slurm.conf" HVDRUN_SLURM_NETNS="$(cat "$dir/ns.net")" \
    sh -c '[ "$(readlink /proc/self/ns/net)" = "$HVDRUN_SLURM_NETNS" ] || { echo "slurm-cluster: not in the cluster namespace" >&2; exit 99; }
           unset HVDRUN_SLURM_NETNS; exec "$@"' sh "$@"
}

up() {
  local dir=$1 k=$2
  [ "$(id -u)" = 0 ] || { echo "slurm-cluster: needs root (namespaces)" >&2; exit 2; }
  command -v slurmctld >/dev/null && command -v slurmd >/dev/null ||
    { echo "slurm-cluster: slurmctld/slurmd missing (apt-get install slurmctld slurmd slurm-client)" >&2; exit 2; }
  mkdir -p "$dir"/{state,spool,run,log}
  for i in $(seq 1 "$k"); do mkdir -p "$dir/spool/n$i"; done
  conf "$dir" "$k" > "$dir/slurm.conf"
  # init: loopback up, the daemons started, then it waits; when it dies (down), the kernel
  # ends every process of the PID namespace.
  cat > "$dir/init.sh" <<INIT
#!/bin/sh
hostname localhost
ip link set lo up
# Slurm resolves with AI_ADDRCONFIG, which wants one address other than 127.x: a
# documentation address (TEST-NET-1) on loopback itself, reachable only from inside.
ip addr add 192.0.2.1/32 dev lo
export SLURM_CONF=$dir/slurm.conf
slurmctld -i -f $dir/slurm.conf
for i in \$(seq 1 $k); do slurmd -f $dir/slurm.conf -N n\$i; done
touch $dir/started
# PID 1 of the namespace: reap whatever is orphaned here, for as long as the cluster lives.
exec python3 -c '
import os, time
while True:
    try:
        os.wait()
    except ChildProcessError:
        time.sleep(1)
' 
INIT
  chmod +x "$dir/init.sh"
  rm -f "$dir/started"
  setsid unshare --pid --net --mount --uts --fork --mount-proc --kill-child "$dir/init.sh" \
    > "$dir/log/init.out" 2>&1 < /dev/null &
  local holder=$! init=""
  echo "$holder" > "$dir/holder.pid"
  for _ in $(seq 1 100); do
    init=$(cat "/proc/$holder/task/$holder/children" 2>/dev/null | awk '{print $1}')
    [ -n "$init" ] && [ "$(readlink "/proc/$init/ns/net" 2>/dev/null)" != "$(readlink /proc/1/ns/net)" ] && break
    init=""
    sleep 0.05
  done
  [ -n "$init" ] || { echo "slurm-cluster: the namespace did not start" >&2; cat "$dir/log/init.out" >&2; exit 1; }
  echo "$init" > "$dir/ns.pid"
  readlink "/proc/$init/ns/net" > "$dir/ns.net"
  # Loopback only, or nothing runs.
  links=$(nsenter -t "$init" -n ip -o link show | awk -F': ' '{print $2}' | tr '\n' ' ')
  [ "$links" = "lo " ] || { echo "slurm-cluster: the namespace has links besides lo: $links" >&2; down "$dir"; exit 1; }
  for _ in $(seq 1 200); do
    if [ -e "$dir/started" ]; then
      idle=$(in_ns "$dir" sinfo -h -N -o '%N %T' 2>/dev/null | sort -u | grep -c ' idle$' || true)
      [ "$idle" = "$k" ] && return 0
    fi
    sleep 0.1
  done
  echo "slurm-cluster: the nodes did not come up idle:" >&2
  in_ns "$dir" sinfo -N >&2 || true
  tail -5 "$dir/log/slurmctld.log" >&2 || true
  exit 1
}

down() {
  local dir=$1 holder init
  init=$(live_init "$dir" 2>/dev/null) && kill -9 "$init" 2>/dev/null || true
  holder=$(cat "$dir/holder.pid" 2>/dev/null) && kill -9 "$holder" 2>/dev/null || true
  rm -f "$dir/ns.pid" "$dir/ns.net"
}

case "${1:-}" in
  up) up "$2" "$3" ;;
  exec) d=$2; shift 2; in_ns "$d" "$@" ;;
  down) down "$2" ;;
  *) echo "usage: slurm-cluster.sh up DIR K | exec DIR CMD... | down DIR" >&2; exit 2 ;;
esac
