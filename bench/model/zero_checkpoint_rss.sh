#!/bin/bash
# Peak RSS of every rank over a whole run that saves a checkpoint (issue 39), ZeRO stages 0/1/2 at 2 and 3 Gloo ranks
# on this host, for two taehv-train builds interleaved (before: main's, after: this tree's).
#   [WORLDS="2 3"] bench/model/zero_checkpoint_rss.sh BEFORE_BIN AFTER_BIN [BATCHxFRAMESxSIZE ...]   (default 1x4x32)
# One line per run: shape, build, world, stage, each rank's peak RSS (MiB, /usr/bin/time -v), wall seconds.
set -u
before=$1; after=$2; shift 2
shapes=("${@:-1x4x32}")
work=$(mktemp -d /tmp/zero-ckpt-rss.XXXXXX)
trap 'rm -rf "$work"' EXIT
run() {  # BIN WORLD STAGE BATCH FRAMES SIZE -> "rss0 rss1 ... | seconds"
  local bin=$1 world=$2 stage=$3 batch=$4 frames=$5 size=$6 port=$((30000 + RANDOM % 20000)) pids=() out
  out=$work/run-$RANDOM
  local t0=$(date +%s.%N)
  for ((r = 0; r < world; r++)); do
    TAEHV_DEVICE=cpu RANK=$r WORLD_SIZE=$world LOCAL_RANK=$r LOCAL_WORLD_SIZE=$world MASTER_ADDR=127.0.0.1 \
      MASTER_PORT=$port /usr/bin/time -v -o "$out.time$r" "$bin" --set data.size=$size --set data.frames=$frames \
      --set train.batch_per_rank=$batch --set train.threads=1 --set train.steps=6 --set checkpoint.every=0 \
      --set log.preview_every=0 --set checkpoint.export_safetensors=false --set train.zero_stage=$stage \
      --set output.dir=$out --set train.seed=3 >"$out.log$r" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || { echo "rank failed: $(tail -2 "$out".log*)" >&2; }; done
  local t1=$(date +%s.%N) line=""
  for ((r = 0; r < world; r++)); do
    kb=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$out.time$r")
    line+=$(printf '%5d ' $((kb / 1024)))
  done
  [ -d "$out/checkpoint-6" ] || echo "no checkpoint-6 in $out" >&2
  rm -rf "$out"
  printf '%s| %.1f s' "$line" "$(echo "$t1 - $t0" | bc)"
}
for shape in "${shapes[@]}"; do
  IFS=x read -r batch frames size <<<"$shape"
  for world in ${WORLDS:-2 3}; do
    for stage in 0 1 2; do
      for build in before after; do
        bin=$before; [ $build = after ] && bin=$after
        echo "${batch}x${frames}x${size}x${size} $build W=$world stage $stage: $(run "$bin" $world $stage $batch $frames $size)"
      done
    done
  done
done
