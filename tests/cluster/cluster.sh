#!/usr/bin/env bash
# Test hosts on this machine: network namespaces joined by a bridge through veth pairs,
# each running its own sshd (Debian's openssh-server) on its own address, with its own
# generated host key. Needs root, iproute2 and openssh-server.
#
#   cluster.sh up DIR K    make hosts h1..hK (10.250.0.11 ...) and, in DIR:
#                          home/.ssh/{id_ed25519,config,known_hosts} for the launcher
#                          (HOME=DIR/home), hosts.txt (name address per line)
#   cluster.sh down DIR    stop every sshd, remove the namespaces and the bridge
#
# With CLUSTER_OWN_HOSTS=1, this machine's hostname resolves on each host to that host's
# address (as on a real cluster, where it is each host's own name), through
# /etc/netns/hvdhN/hosts, which `ip netns exec` mounts over /etc/hosts for sshd and so for
# everything started over ssh. Without it the name resolves to 127.0.0.1 on every host,
# and programs that find their address from their hostname (Gloo without an interface,
# as Horovod 0.28.1's process-set contexts do) hand out 127.0.0.1 to the other hosts.
#
# One default cluster at a time (its names and subnet are fixed): ctest serialises the tests
# that use it with a resource lock.
set -euo pipefail
BR=hvdbr0 NET=10.250.0 PREFIX=hvdh VETH=hvdv
# CLUSTER_NAME=X: a second, separate cluster (bridge hvdbrX, namespaces hvdXN, veths hvXvN,
# subnet CLUSTER_NET, e.g. 10.251.0), beside the one the cluster tests use; no name of it
# matches the default cluster's (which `down` of that one, of this or an older script, removes).
if [ -n "${CLUSTER_NAME:-}" ]; then
  BR=hvdbr$CLUSTER_NAME NET=${CLUSTER_NET:?CLUSTER_NAME needs CLUSTER_NET} PREFIX=hvd$CLUSTER_NAME VETH=hv${CLUSTER_NAME}v
fi

down() {
  local dir=$1
  for pidfile in "$dir"/h*/sshd.pid; do
    [ -e "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null || true
  done
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$PREFIX" || true); do
    # Anything left in the namespace (sshd sessions, agents, workers) goes first.
    for pid in $(ip netns pids "$ns" 2>/dev/null || true); do kill -9 "$pid" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  done
  rm -rf /etc/netns/"$PREFIX"[0-9]*
  rmdir /etc/netns 2>/dev/null || true
  # Host-side veth ends: a namespace can outlive its processes while orphaned TCP sockets
  # in it wait out their retransmissions, and with it the veth pair. Deleting our end
  # removes the pair at once.
  for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep "^$VETH[0-9]" || true); do
    ip link del "$link" 2>/dev/null || true
  done
  ip link del "$BR" 2>/dev/null || true
}

up() {
  local dir=$1 k=$2
  [ "$(id -u)" = 0 ] || { echo "cluster.sh: needs root (network namespaces)" >&2; exit 2; }
  command -v /usr/sbin/sshd >/dev/null || { echo "cluster.sh: /usr/sbin/sshd missing (apt-get install openssh-server)" >&2; exit 2; }
  down "$dir"
  mkdir -p "$dir/home/.ssh" /run/sshd
  chmod 700 "$dir/home/.ssh"
  ssh-keygen -q -t ed25519 -N '' -f "$dir/home/.ssh/id_ed25519" <<<y >/dev/null
  cp "$dir/home/.ssh/id_ed25519.pub" "$dir/authorized_keys"
  : > "$dir/home/.ssh/known_hosts"
  : > "$dir/home/.ssh/config"
  : > "$dir/hosts.txt"
  ip link add "$BR" type bridge
  ip addr add "$NET.1/24" dev "$BR"
  ip link set "$BR" up
  for i in $(seq 1 "$k"); do
    local ns=$PREFIX$i addr=$NET.$((10 + i)) h=$dir/h$i
    mkdir -p "$h"
    ip netns add "$ns"
    ip link add "$VETH$i" type veth peer name eth0 netns "$ns"
    ip link set "$VETH$i" master "$BR" up
    ip -n "$ns" addr add "$addr/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    if [ "${CLUSTER_OWN_HOSTS:-0}" = 1 ]; then
      mkdir -p "/etc/netns/$ns"
      printf '127.0.0.1 localhost\n%s %s h%s\n' "$addr" "$(hostname)" "$i" > "/etc/netns/$ns/hosts"
    fi
    ssh-keygen -q -t ed25519 -N '' -f "$h/ssh_host_ed25519_key" <<<y >/dev/null
    cat > "$h/sshd_config" <<CFG
ListenAddress $addr
Port 22
HostKey $h/ssh_host_ed25519_key
PidFile $h/sshd.pid
AuthorizedKeysFile $dir/authorized_keys
StrictModes no
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
UseDNS no
MaxStartups 200
MaxSessions 100
LogLevel ERROR
CFG
    # CLUSTER_CHROOT=DIR: each host's sessions run in DIR (an image's root file system).
    [ -n "${CLUSTER_CHROOT:-}" ] && echo "ChrootDirectory $CLUSTER_CHROOT" >> "$h/sshd_config"
    ip netns exec "$ns" /usr/sbin/sshd -f "$h/sshd_config" -E "$h/sshd.log"
    printf 'Host h%s\n  HostName %s\n  User root\n' "$i" "$addr" >> "$dir/home/.ssh/config"
    echo "h$i $addr" >> "$dir/hosts.txt"
  done
  # Wait until every sshd accepts connections.
  for i in $(seq 1 "$k"); do
    for _ in $(seq 1 100); do
      (exec 3<>"/dev/tcp/$NET.$((10 + i))/22") 2>/dev/null && break
      sleep 0.05
    done
  done
}

case "${1:-}" in
  up) up "$2" "$3" ;;
  down) down "$2" ;;
  *) echo "usage: cluster.sh up DIR K | down DIR" >&2; exit 2 ;;
esac
