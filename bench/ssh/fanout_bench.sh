#!/usr/bin/env bash
# Fan-out and teardown time of `taehv-run --backend ssh` against the number of hosts, on real sshd hosts in
# network namespaces (tests/infra/ssh/sshd_hosts.sh; needs root). Host counts 1, 2, 3 (one namespace each) and
# 16 (entries r1..r16 aliased onto the 3 namespaces through ssh_config: 16 ssh connections, 16 remote
# taehv-run). Printed beside the alternative: starting the hosts one after another (a plain ssh loop).
#
#   bash bench/ssh/fanout_bench.sh [BUILD_DIR]      (default: build-ssh; needs bin/taehv-run and the ssh plugin)
#
# Columns (median of REPEAT runs, seconds):
#   start      launch -> every worker of every host is running (preflight + fan-out)
#   teardown   SIGINT to the launcher -> no process of the job left anywhere
#   e2e        a whole job running /bin/true: launch -> launcher exited 0
#   serial     the alternative: `ssh HOST taehv-run --version` host after host
#   busy       share of this machine's CPU time that was busy during `start` (all processes, /proc/stat):
#              near 100 % means the fan-out waited for CPU, not for the network or for one host after another
# On one small machine every "host" and the launcher share the same cores, so each extra host adds the CPU of
# both ends of an SSH key exchange; on a real cluster the remote half runs on the remote machines.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BUILD=${1:-$ROOT/build-ssh}
BIN=$BUILD/bin/taehv-run
REPEAT=${REPEAT:-3}
[ -x "$BIN" ] || { echo "no $BIN: build taehv-run and taehv_plugin_ssh first" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "needs root (network namespaces)" >&2; exit 2; }

WORK=$(mktemp -d /tmp/taehv-ssh-bench-XXXXXX)
mkfifo "$WORK/hold"
bash "$ROOT/tests/infra/ssh/sshd_hosts.sh" serve "$WORK/hosts" 3 <"$WORK/hold" >"$WORK/serve.out" 2>"$WORK/serve.err" &
SERVE=$!
exec 9>"$WORK/hold"   # the hosts live while we hold this open
LAUNCHER=""
cleanup() {
  [ -n "$LAUNCHER" ] && kill -KILL "$LAUNCHER" 2>/dev/null || true
  exec 9>&-
  wait "$SERVE" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
for _ in $(seq 1 300); do grep -q READY "$WORK/serve.out" 2>/dev/null && break; sleep 0.1; done
grep -q READY "$WORK/serve.out" || { cat "$WORK/serve.err" >&2; exit 1; }
CFG=$WORK/ssh_config
cp "$WORK/hosts/ssh_config" "$CFG"
for i in $(seq 1 16); do printf 'Host r%d\n  HostName 10.77.0.%d\n' "$i" $(( (i - 1) % 3 + 2 )) >> "$CFG"; done

now() { date +%s.%N; }
since() { awk -v a="$(now)" -v b="$1" 'BEGIN {printf "%.3f", a - b}'; }
cpu() { awk '/^cpu / {print $2+$3+$4+$7+$8, $2+$3+$4+$5+$6+$7+$8}' /proc/stat; }  # "busy total" jiffies
count() { grep -lzsx "TAEHV_TEST_MARKER=$1" /proc/[0-9]*/environ 2>/dev/null | wc -l; }
median() { sort -n | awk '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%.2f", m}'; }
hostfile() {  # N -> hostfile path
  local n=$1 f=$WORK/hostfile.$1
  : > "$f"
  if [ "$n" -le 3 ]; then for i in $(seq 1 "$n"); do echo "h$i slots=1" >> "$f"; done
  else for i in $(seq 1 "$n"); do echo "r$i slots=1" >> "$f"; done; fi
  echo "$f"
}

run_once() {  # N -> "start teardown e2e serial busy%"
  local n=$1 hf mark run t0 start teardown e2e serial c0 c1 busy
  hf=$(hostfile "$n")
  mark=bench-$$-$n-$RANDOM$RANDOM
  run=$WORK/run-$mark; mkdir -p "$run"
  # start + teardown: workers touch started.RANK, then sleep until torn down.
  t0=$(now)
  c0=$(cpu)
  (cd "$run" && exec "$BIN" --backend ssh --hostfile "$hf" --ssh-opts "-F $CFG" --env "TAEHV_TEST_MARKER=$mark" \
     --remote-grace 5 -- /bin/sh -c 'touch started.$RANK; exec sleep 300') >"$run/out" 2>&1 &
  LAUNCHER=$!
  until [ "$(ls "$run" | grep -c '^started\.')" -ge "$n" ]; do
    kill -0 "$LAUNCHER" 2>/dev/null || { cat "$run/out" >&2; exit 1; }
    sleep 0.01
  done
  start=$(since "$t0")
  c1=$(cpu)
  busy=$(echo "$c0 $c1" | awk '{d = $4 - $2; print (d > 0) ? 100 * ($3 - $1) / d : 0}')
  t0=$(now)
  kill -INT "$LAUNCHER"
  wait "$LAUNCHER" || true
  LAUNCHER=""
  until [ "$(count "$mark")" -eq 0 ]; do sleep 0.01; done
  teardown=$(since "$t0")
  # e2e: a job that just exits.
  t0=$(now)
  (cd "$run" && "$BIN" --backend ssh --hostfile "$hf" --ssh-opts "-F $CFG" -- /bin/true) >"$run/e2e" 2>&1 \
    || { cat "$run/e2e" >&2; exit 1; }
  e2e=$(since "$t0")
  # serial alternative: one ssh after another.
  t0=$(now)
  while read -r h _; do ssh -F "$CFG" -n -- "$h" "$BIN --version" >/dev/null; done < "$hf"
  serial=$(since "$t0")
  echo "$start $teardown $e2e $serial $busy"
}

printf '%-6s %-10s %-10s %-10s %-12s %-13s %-8s\n' hosts "start s" "teardown s" "e2e s" "serial ssh s" "start/host s" "busy %"
for n in 1 2 3 16; do
  : > "$WORK/samples"
  for _ in $(seq 1 "$REPEAT"); do run_once "$n" >> "$WORK/samples"; done
  s=$(awk '{print $1}' "$WORK/samples" | median)
  t=$(awk '{print $2}' "$WORK/samples" | median)
  e=$(awk '{print $3}' "$WORK/samples" | median)
  q=$(awk '{print $4}' "$WORK/samples" | median)
  b=$(awk '{print $5}' "$WORK/samples" | median)
  printf '%-6s %-10s %-10s %-10s %-12s %-13.2f %-8.0f\n' "$n" "$s" "$t" "$e" "$q" \
    "$(awk -v s="$s" -v n="$n" 'BEGIN {print s / n}')" "$b"
done
