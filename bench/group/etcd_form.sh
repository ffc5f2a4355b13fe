#!/usr/bin/env bash
# Formation time, the TCP node group beside the etcd node group (issue 34): starts one etcd member (Debian's
# etcd-server, as tests/core/group/etcd_server.h does) in a temporary folder on loopback, runs
# `build/bench/group_bench form` against it, then stops etcd and removes the folder.
# Usage: bash bench/group/etcd_form.sh [REPS [NODES...]]   (defaults: 3 repetitions of 64 256 1024 nodes)
# ETCD_PORT (default 23790) and ETCD_PEER_PORT (23800): below 32768, outside Linux's ephemeral range, so no client
# connection of this machine holds them; run under `flock /tmp/taehv-slow.lock`.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPS=${1:-3}
shift || true
NODES=("$@")
[ $# -eq 0 ] && NODES=(64 256 1024)
BENCH=${BENCH:-build/bench/group_bench}
CLIENT_PORT=${ETCD_PORT:-23790}
PEER_PORT=${ETCD_PEER_PORT:-23800}
command -v etcd >/dev/null || { echo "etcd_form.sh: no etcd on PATH: install etcd-server (scripts/setup.sh does)" >&2; exit 2; }
[ -x "$BENCH" ] || { echo "etcd_form.sh: $BENCH not built: cmake --build build --target group_bench" >&2; exit 2; }
tmp=$(mktemp -d /tmp/taehv-etcd-bench-XXXXXX)
etcd_pid=
cleanup() {  # etcd's own exit status (143 from the SIGTERM) is not the benchmark's
  if [ -n "$etcd_pid" ]; then kill "$etcd_pid" 2>/dev/null || true; wait "$etcd_pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
# etcd holds one connection per node mid-call: its open-file limit up to the hard one, as group_bench does its own.
ulimit -n "$(ulimit -Hn)"
client=http://127.0.0.1:$CLIENT_PORT
peer=http://127.0.0.1:$PEER_PORT
etcd --name bench --data-dir "$tmp/data" --listen-client-urls "$client" --advertise-client-urls "$client" \
  --listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" --initial-cluster "bench=$peer" \
  --initial-cluster-token "$tmp" >"$tmp/etcd.log" 2>&1 &
etcd_pid=$!
for _ in $(seq 100); do
  ETCDCTL_API=3 etcdctl --endpoints "$client" --dial-timeout 1s get / >/dev/null 2>&1 && break
  kill -0 "$etcd_pid" 2>/dev/null || { echo "etcd_form.sh: etcd ended at start:" >&2; cat "$tmp/etcd.log" >&2; exit 1; }
  sleep 0.2
done
echo "etcd $(etcd --version | head -1 | cut -d' ' -f3) at 127.0.0.1:$CLIENT_PORT (one member, data in $tmp); $(nproc) cores," \
  "load $(cut -d' ' -f1 /proc/loadavg); $(date -u '+%F %H:%M UTC')"
"$BENCH" form "127.0.0.1:$CLIENT_PORT" "$REPS" "${NODES[@]}"
