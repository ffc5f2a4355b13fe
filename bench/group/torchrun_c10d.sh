#!/usr/bin/env bash
# torchrun's c10d rendezvous beside bench/group/group_bench: N torchrun agents on loopback, one per simulated
# node, each `--rdzv-backend c10d --nnodes N:N --no-python /bin/true`, started together. Prints the wall time until
# every agent has exited (the rendezvous is most of it: the workers are /bin/true), and the first agent's (node 0,
# the c10d store host) CPU time and peak RSS, plus the largest peak RSS of any agent.
# Usage: bash bench/group/torchrun_c10d.sh N   (run under `flock /tmp/taehv-slow.lock`)
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${1:?N agents}
TORCHRUN=${TORCHRUN:-.venv/bin/torchrun}
PORT=${PORT:-$((40000 + RANDOM % 10000))}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
agent() {
  /usr/bin/time -f "%e %U %S %M" -o "$tmp/time.$1" "$TORCHRUN" --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$PORT" \
    --rdzv-id bench --nnodes "$N:$N" --nproc-per-node 1 --no-python /bin/true >"$tmp/out.$1" 2>&1
}
start=$(date +%s.%N)
agent 0 &
pids=($!)
sleep 0.2  # node 0 first, so that it is the one hosting the store
for i in $(seq 1 $((N - 1))); do
  agent "$i" &
  pids+=($!)
done
fail=0
for p in "${pids[@]}"; do wait "$p" || fail=$((fail + 1)); done
end=$(date +%s.%N)
read -r _ u0 s0 m0 <"$tmp/time.0"
maxrss=$(cat "$tmp"/time.* | awk '$4 > m {m = $4} END {print m}')
printf 'agents=%d failed=%d wall_s=%.2f node0_cpu_s=%.2f node0_peak_rss_mb=%.1f max_agent_rss_mb=%.1f\n' "$N" "$fail" \
  "$(echo "$end - $start" | bc)" "$(echo "$u0 + $s0" | bc)" "$(echo "$m0 / 1024" | bc -l)" "$(echo "$maxrss / 1024" | bc -l)"
