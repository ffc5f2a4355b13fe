# Sourced by tests/infra/{ssh/sshd_hosts.sh,group/netns_nodes.sh}: N test hosts as network namespaces
# $PFX1..N (addresses $NET.2..) on bridge $BR ($NET.1), and their removal. Adapted from ../shared/infra/netns.sh.
PFX=${PFX:-ri-h}; BR=${BR:-ri-br0}; NET=${NET:-10.77.0}

netns_up() {
  local n=$1
  ip link show "$BR" >/dev/null 2>&1 || {
    ip link add "$BR" type bridge
    ip addr add "$NET.1/24" dev "$BR"
    ip link set "$BR" up
  }
  for i in $(seq 1 "$n"); do
    local ns=$PFX$i addr=$NET.$((i+1))
    ip netns add "$ns"
    ip link add "$ns-v" type veth peer name eth0 netns "$ns"
    ip link set "$ns-v" master "$BR" up
    ip -n "$ns" addr add "$addr/24" dev eth0
    ip -n "$ns" link set lo up
    ip -n "$ns" link set eth0 up
    ip -n "$ns" route add default via "$NET.1"
  done
}

netns_down() {
  local n=$1
  for i in $(seq 1 "$n"); do
    # Processes still inside (sshd's per-connection children, a test's nodes) could never close their TCP
    # connections once the veth is gone: end everything in the namespace before removing it.
    ip netns pids "$PFX$i" 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true
    ip link del "$PFX$i-v" 2>/dev/null || true
    ip netns del "$PFX$i" 2>/dev/null || true
  done
  ip link del "$BR" 2>/dev/null || true
}
