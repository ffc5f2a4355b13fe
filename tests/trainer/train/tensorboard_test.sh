#!/usr/bin/env bash
# TensorBoard itself reads our events: a short taehv-train run writes them, TensorBoard's event_accumulator (in the
# project's .venv) reads them back (tensorboard_read.py says what is checked).
# Usage: tensorboard_test.sh TAEHV_TRAIN PYTHON
set -euo pipefail
here=$(dirname "$0")
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
OMP_NUM_THREADS=1 "$1" --set train.steps=4 --set log.every=2 --set log.preview_every=2 --set data.size=32 \
  --set data.frames=4 --set train.batch_per_rank=1 --set checkpoint.every=0 --set output.dir="$out" >"$out.log" 2>&1 ||
  { cat "$out.log"; exit 1; }
rm -f "$out.log"
"$2" "$here/tensorboard_read.py" "$out/tensorboard" 4 2 2
