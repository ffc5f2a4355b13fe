#!/usr/bin/env bash
# Hostlist expansion speed: `taehv-run --backend slurm hostnames` (our parser, plugin load included) next to
# SLURM's own `scontrol show hostnames`, median wall time of RUNS runs each, output checked identical.
# Usage: bash bench/slurm/hostlist.sh [BUILD_DIR] (default build)   RUNS=15
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
RUN="$BUILD/bin/taehv-run"
RUNS=${RUNS:-15}
[ -x "$RUN" ] || { echo "build taehv-run and the slurm plugin first ($RUN missing)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf 'ClusterName=bench\nSlurmctldHost=localhost\n' >"$tmp/slurm.conf"  # scontrol needs a config, no daemon
export SLURM_CONF=$tmp/slurm.conf

median_ms() {  # median_ms CMD...: median wall time in ms over RUNS runs (output to /dev/null)
  for _ in $(seq "$RUNS"); do
    s=$(date +%s%N); "$@" >/dev/null; e=$(date +%s%N); echo $(((e - s) / 1000))
  done | sort -n | awk '{a[NR]=$1} END {printf "%.2f", a[int((NR+1)/2)]/1000}'
}

printf '%-28s %8s %12s %12s %s\n' list hosts taehv-run_ms scontrol_ms same-output
for list in 'n[0-65535]' 'a[0-255].b[0-255]' 'linux[0000-1023]' 'r[1-16]n[001-064]g[0-7]'; do
  "$RUN" --backend slurm hostnames "$list" >"$tmp/ours"
  hosts=$(wc -l <"$tmp/ours")
  if command -v scontrol >/dev/null; then
    scontrol show hostnames "$list" >"$tmp/theirs"
    same=$(cmp -s "$tmp/ours" "$tmp/theirs" && echo yes || echo NO)
    theirs=$(median_ms scontrol show hostnames "$list")
  else
    same=n/a theirs=n/a
  fi
  printf '%-28s %8s %12s %12s %s\n' "$list" "$hosts" "$(median_ms "$RUN" --backend slurm hostnames "$list")" \
    "$theirs" "$same"
done
echo "(taehv-run's time includes process start and plugin loading; plain startup: $(median_ms "$RUN" --version) ms)"
