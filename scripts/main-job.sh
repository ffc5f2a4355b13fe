#!/usr/bin/env bash
# README command 1: installs what is needed, builds, and runs the main job: taehv-run starts 2 local
# taehv-train workers (Gloo over loopback) training TAEHV on synthetic video, 64x64, 12 frames.
# Output: runs/taehv/ (checkpoint-STEP/, metrics.jsonl, tensorboard/, previews/, weights.safetensors).
# TAEHV_MAIN_STEPS overrides the step count (default 300, about 10-15 minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
out=runs/taehv
steps="${TAEHV_MAIN_STEPS:-300}"
rm -rf "$out"
start=$(date +%s)
build/bin/taehv-run --standalone --nproc-per-node 2 -- \
  "$PWD/build/bin/taehv-train" --config examples/configs/quickstart.yaml \
  --set "train.steps=$steps" --set "output.dir=$out"
end=$(date +%s)
python3 - "$out/metrics.jsonl" "$((end - start))" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
last_step = rows[-1]["step"]
def mean(rs, key):  # rows hold means over their log window
    return sum(r[key] for r in rs) / len(rs)
first = rows[0]  # step 1: the initial model, whose output is mid-grey (decoder bias 0.5)
low = min(rows, key=lambda r: r["psnr"])
late = [r for r in rows if r["step"] > last_step - 30]
print(f"main job: {last_step} steps in {sys.argv[2]} s; PSNR {first['psnr']:.2f} dB at step 1 (mid-grey output), "
      f"lowest {low['psnr']:.2f} dB (log window ending at step {low['step']}), {mean(late, 'psnr'):.2f} dB over the "
      f"last 30 steps; loss {first['loss']:.5f} -> {mean(late, 'loss'):.5f}")
PY
ls "$out"
