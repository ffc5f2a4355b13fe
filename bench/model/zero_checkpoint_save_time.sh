#!/bin/bash
# Save cost per checkpoint (issue 39): a run saving at every one of its 6 steps minus one saving once, / 5; ZeRO
# stages 0/1/2, 2 Gloo ranks on this host, 1x4x32x32, AdamW.   bench/model/zero_checkpoint_save_time.sh TAEHV_TRAIN
bin=$1
run() {  # every stage -> seconds
  local every=$1 stage=$2 port=$((30000 + RANDOM % 20000)) out=/tmp/st-$RANDOM pids=()
  local t0=$(date +%s.%N)
  for r in 0 1; do
    TAEHV_DEVICE=cpu RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      "$bin" --set data.size=32 --set data.frames=4 --set train.batch_per_rank=1 --set train.threads=1 \
      --set train.steps=6 --set checkpoint.every=$every --set checkpoint.keep=10 --set log.preview_every=0 \
      --set checkpoint.export_safetensors=false --set train.zero_stage=$stage --set output.dir=$out --set train.seed=3 \
      >/dev/null 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait $p || echo "rank failed" >&2; done
  local t1=$(date +%s.%N); rm -rf $out
  echo "$t1 - $t0" | bc
}
for round in 1 2; do
  for stage in 0 1 2; do
    a=$(run 1 $stage); b=$(run 0 $stage)
    echo "round $round stage $stage: every-step ${a}s once ${b}s per-save $(echo "scale=3; ($a - $b)/5" | bc)s"
  done
done
