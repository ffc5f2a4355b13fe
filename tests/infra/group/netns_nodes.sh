#!/usr/bin/env bash
# Test nodes for the node group: N network namespaces ri-h1..N (10.77.0.2..) on bridge ri-br0 (10.77.0.1), no
# daemons. Adapted from ../shared/infra/netns.sh; the same names as tests/infra/ssh/sshd_hosts.sh (the tests take
# the ctest RESOURCE_LOCK netns-ssh and the flock /tmp/taehv-slow.lock).
#
#   netns_nodes.sh serve N   bring the namespaces up, print "READY", hold them until stdin reaches EOF (the test
#                            closed its pipe or died), then kill whatever still runs in them and remove them.
#   netns_nodes.sh down N    remove what an earlier run left.
set -euo pipefail
ACTION=${1:?serve|down}; N=${2:-3}
PFX=${PFX:-ri-h}; BR=${BR:-ri-br0}; NET=${NET:-10.77.0}

down() {
  for i in $(seq 1 "$N"); do
    ip netns pids "$PFX$i" 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true
    ip link del "$PFX$i-v" 2>/dev/null || true
    ip netns del "$PFX$i" 2>/dev/null || true
  done
  ip link del "$BR" 2>/dev/null || true
}

up() {
  ip link add "$BR" type bridge
  ip addr add "$NET.1/24" dev "$BR"
  ip link set "$BR" up
  for i in $(seq 1 "$N"); do
    ns=$PFX$i; addr=$NET.$((i+1))
    ip netns add "$ns"
    ip link add "$ns-v" type veth peer name eth0 netns "$ns"
    ip link set "$ns-v" master "$BR" up
    ip -n "$ns" addr add "$addr/24" dev eth0
    ip -n "$ns" link set lo up
    ip -n "$ns" link set eth0 up
    ip -n "$ns" route add default via "$NET.1"
  done
}

case $ACTION in
  serve)
    down
    trap down EXIT
    up
    echo READY
    cat >/dev/null || true
    ;;
  down) down ;;
  *) echo "usage: $0 serve|down N" >&2; exit 2 ;;
esac
