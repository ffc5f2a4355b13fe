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
# shellcheck source=../netns_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../netns_lib.sh"

case $ACTION in
  serve)
    netns_down "$N"
    trap 'netns_down "$N"' EXIT
    netns_up "$N"
    echo READY
    cat >/dev/null || true
    ;;
  down) netns_down "$N" ;;
  *) echo "usage: $0 serve|down N" >&2; exit 2 ;;
esac
