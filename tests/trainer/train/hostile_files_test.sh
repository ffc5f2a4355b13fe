#!/usr/bin/env bash
# Hostile files, end to end through real taehv-train processes (issue 17, kinds 1, 4, 5, 6): what a write may replace,
# a full disk (a real 8 MiB tmpfs in a private mount namespace), damaged checkpoints on resume, a run into an output
# folder that holds another run, non-finite weights. Each case checks the exit status, the one message, and that no
# file was lost or left behind.
# Usage: hostile_files_test.sh TAEHV_TRAIN PYTHON   (as root: mknod and mount)
set -uo pipefail
train=$1 python=$2
work=$(mktemp -d /tmp/taehv-hostile-files-XXXXXX)
trap 'umount -l "$work/full" 2>/dev/null; rm -rf "$work"' EXIT
failures=0
check() {  # check NAME CONDITION...: one line per case, the log on failure
  local name=$1; shift
  if "$@"; then echo "ok   $name"; else echo "FAIL $name"; failures=$((failures + 1)); [ -f "$work/log" ] && sed 's/^/     | /' "$work/log"; fi
}
has() { grep -q -- "$1" "$work/log"; }
lacks() { ! grep -q -- "$1" "$work/log"; }
run() { "$@" >"$work/log" 2>&1; echo $? >"$work/rc"; }
rc_is() { [ "$(cat "$work/rc")" = "$1" ]; }
# On the CPU also where there is a GPU: the memory refusal checked below is of the machine's RAM (a step too large for
# the GPU ends with CUDA's one out-of-memory line).
tiny=(--set data.size=32 --set data.frames=4 --set train.threads=1 --set log.every=1 --set log.preview_every=0
      --set train.batch_per_rank=1 --set train.seed=3 --set checkpoint.export_safetensors=false --set train.device=cpu)
export OMP_NUM_THREADS=1

# 1. Outputs never replace a device, FIFO or folder. A private character device (1,3 = what /dev/null is) stands in
#    for /dev/null so that a regression cannot destroy the machine's own.
"$python" - "$work/frames.safetensors" <<'PY'
import json, struct, sys
n = 1 * 4 * 3 * 16 * 16
data = struct.pack(f"<{n}f", *([0.5] * n))
header = json.dumps({"input": {"dtype": "F32", "shape": [1, 4, 3, 16, 16], "data_offsets": [0, len(data)]}}).encode()
open(sys.argv[1], "wb").write(struct.pack("<Q", len(header)) + header + data)
PY
weights=${TAEHV_SHARED_DIR:-$(dirname "$0")/../../../../shared}/taehv-reference/taehv.f16.safetensors
mknod "$work/null" c 1 3 && mkfifo "$work/fifo" && mkdir "$work/folder"
for target in null fifo folder; do
  run "$train" encode --variant taehv --weights "$weights" --input "$work/frames.safetensors" --output "$work/$target"
  check "encode --output <$target> is refused with exit 2" rc_is 2
  check "encode --output <$target> says why" has "outputs are written to a temporary file"
done
check "the device is still a character device" test -c "$work/null"
check "the FIFO is still a FIFO" test -p "$work/fifo"
check "no temporary left beside them" test -z "$(ls -A "$work" | grep '\.tmp')"
ln -s "$work/real.safetensors" "$work/link.safetensors"
run "$train" encode --variant taehv --weights "$weights" --input "$work/frames.safetensors" --output "$work/link.safetensors"
check "a symbolic link is written through (exit 0)" rc_is 0
check "... the link stays a link and its target is the output" test -L "$work/link.safetensors" -a -s "$work/real.safetensors"

# 4. A full disk: one message naming the folder and its free space, a clean exit, no temporary left.
mkdir "$work/full"
unshare -m bash -c "mount -t tmpfs -o size=8m tmpfs '$work/full' && mkdir -p '$work/full/run/.tmp-checkpoint-5-999999999' &&
  '$train' ${tiny[*]} --set train.steps=1 --set checkpoint.every=1 --set output.dir='$work/full/run';
  echo \$? >'$work/rc'; ls -A '$work/full/run' >'$work/left'" >"$work/log" 2>&1
check "disk full: the stale temporary of a killed save is removed and said so" has "removed .*\.tmp-checkpoint-5-999999999"
check "disk full: a clean non-zero exit (not an abort)" bash -c "[ \$(cat '$work/rc') -ne 0 ] && [ \$(cat '$work/rc') -lt 128 ]"
check "disk full: the message names the folder's free space" has "MiB free"
check "disk full: no 'terminate called', no stack trace" lacks "terminate called\|frame #"
check "disk full: no temporary folder left" bash -c "! grep -q '^\.tmp-\|^\.old-' '$work/left'"

# 5. Resume: every checkpoint damaged -> refused, nothing overwritten; a second run into the same folder -> refused.
out=$work/run
run "$train" "${tiny[@]}" --set train.steps=2 --set checkpoint.every=1 --set output.dir="$out"
check "a 2-step run with 2 checkpoints" rc_is 0
printf 'torn' >"$out/checkpoint-1/model.pt"
printf 'torn' >"$out/checkpoint-2/optimizer.pt"
before=$(cd "$out" && find . -type f -path './checkpoint-*' -exec md5sum {} + | sort)
run "$train" "${tiny[@]}" --set train.steps=4 --set checkpoint.every=1 --set output.dir="$out" --resume latest
check "resume with every checkpoint damaged: exit 2" rc_is 2
check "... names each damaged checkpoint" has "checkpoint-2 is damaged"
check "... and says nothing was changed" has "Nothing was changed"
after=$(cd "$out" && find . -type f -path './checkpoint-*' -exec md5sum {} + | sort)
check "... and the damaged checkpoints are byte for byte as they were" test "$before" = "$after"
run "$train" "${tiny[@]}" --set train.steps=2 --set output.dir="$out"
check "a new run into a folder holding checkpoints (no --resume): exit 2" rc_is 2
check "... says how to continue" has "--resume latest"

out=$work/resumed
run "$train" "${tiny[@]}" --set train.steps=2 --set checkpoint.every=1 --set output.dir="$out"
rm -r "$out/checkpoint-2"
run "$train" "${tiny[@]}" --set train.steps=3 --set checkpoint.every=1 --set output.dir="$out" --resume latest
check "resume from checkpoint-1 to step 3" rc_is 0
check "metrics.jsonl holds each step once (1, 2, 3)" test "$("$python" -c '
import json, sys; print(",".join(str(json.loads(l)["step"]) for l in open(sys.argv[1]) if l.strip()))' "$out/metrics.jsonl")" = "1,2,3"

# 6. Non-finite weights are refused on load; eval's JSON stays JSON.
"$python" - "$weights" "$work/nan.safetensors" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
name = next(k for k in header if k != "__metadata__")
begin = 8 + n + header[name]["data_offsets"][0]
data = bytearray(raw)
data[begin:begin + 2] = b"\x00\x7e"  # one float16 NaN
open(sys.argv[2], "wb").write(bytes(data))
PY
run "$train" encode --variant taehv --weights "$work/nan.safetensors" --input "$work/frames.safetensors" --output "$work/nan-out.safetensors"
check "encode with NaN weights: exit 2" rc_is 2
check "... names the tensor and the NaN" has "NaN or infinite"
check "... and writes nothing" test ! -e "$work/nan-out.safetensors"
run "$train" eval --checkpoint "$work/nan.safetensors" --set data.size=32 --set data.frames=4 --set eval.clips=1
check "eval with NaN weights: non-zero exit" bash -c "[ \$(cat '$work/rc') -ne 0 ]"
check "... and no 'nan' printed as JSON" lacks '"psnr": nan'

# 7. Configs: refused before anything heavy, with exit 2; SIGTERM is honoured within seconds at any point.
run "$train" "${tiny[@]}" --set train.beta1=1.5 --set output.dir="$work/beta"
check "train.beta1=1.5: exit 2 with the range" bash -c "rc=\$(cat '$work/rc'); [ \$rc = 2 ] && grep -q 'train.beta1 must be in \[0, 1)' '$work/log'"
run "$train" "${tiny[@]}" --set data.frames=4000 --set data.size=256 --set output.dir="$work/frames"
check "data.frames=4000 at 256x256: exit 2 with the memory figures" bash -c "rc=\$(cat '$work/rc'); [ \$rc = 2 ] && grep -q 'one training step needs about' '$work/log'"
run "$train" --config "$(dirname "$0")/../../../examples/configs" --set output.dir="$work/folder-config"
check "--config FOLDER: exit 2" rc_is 2
# A long step (256x256, 12 frames: several seconds each on this machine): SIGTERM mid-step ends the run within the
# trainer's 20 s stop grace, either saving after the step (exit 0) or, if the step is longer, without saving.
"$train" "${tiny[@]}" --set data.size=256 --set data.frames=12 --set train.steps=1000 --set checkpoint.every=0 \
  --set output.dir="$work/long" >"$work/log" 2>&1 &
pid=$!
for _ in $(seq 600); do grep -q '^step 1/' "$work/log" && break; sleep 0.1; done
kill -TERM $pid
start=$(date +%s)
wait $pid; rc=$?
took=$(( $(date +%s) - start ))
check "SIGTERM during a long step: the run ends within 25 s (took ${took} s, exit $rc)" test "$took" -le 25
check "... cleanly: exit 0 with a checkpoint, or 143 with the message" bash -c "[ $rc = 0 ] && ls '$work/long' | grep -q '^checkpoint-' || { [ $rc = 143 ] && grep -q 'did not end within 20 s' '$work/log'; }"

echo "$failures failure(s)"
[ "$failures" -eq 0 ]
