#!/usr/bin/env bash
# The one-command check on a machine with an NVIDIA GPU and a stock PyTorch image (python3 with a CUDA torch >= 2.9,
# nvcc, CMake, a C++ compiler; no apt, no -dev packages, nothing downloadable): builds taehv-run, its plugins and the
# CUDA trainer against that torch with the offline bundle (scripts/bundle-deps.sh, made beforehand on a Debian
# machine), runs the trainer's tests there, trains the quickstart on the GPU under taehv-run, and times
# `taehv-train bench --device cuda` beside the same machine's PyTorch running the Python loop. Every figure goes to
# one report file.
#
# usage: scripts/gpu-check.sh build|test|train|bench|cpu|all
#   each stage fits a 10-minute command; `all` runs build, test, train and bench in order. Stages after `build` use
#   its build folder. `cpu` (about 2 minutes, not in `all`): issue 40's figures on this machine's CPU, which on the GPU
#   machines computes bf16 natively (AMX), unlike the 2-core CI machines: the bare step (bf16 where the CPU has it),
#   the main job's step and fp32 Winograd against direct convolutions, pinned to 2 cores as the main job's machine
#   (bench/model/RESULTS.md).
# environment:
#   TAEHV_DEPS        the bundle (default: deps-bundle/)
#   TAEHV_SHARED_DIR  reference data for the tests (default: ../shared; tests of variants whose files are absent are
#                     left out, and the report names them)
#   GPU_CHECK_BUILD   build folder (default: build-gpu/)
#   GPU_CHECK_OUT     where the report and run folders go (default: runs/gpu-check/); the report is report.txt
#   GPU_CHECK_TARGETS what the build stage builds (default: all; e.g. "taehv-run taehv-train" for a short first
#                     call: the test stage builds the test programs it needs)
#   GPU_CHECK_MODES   the Python loop's modes in the bench stage (default: "eager compile")
#   GPU_CHECK_PRECISIONS  (default: "fp32 bf16 bf16-cl": -cl runs channels_last on both sides); GPU_CHECK_JOBS: ctest's
#                     parallel tests (default 12); GPU_CHECK_BATCH, GPU_CHECK_SIZE, GPU_CHECK_STEPS: the bench shape
# Fails with one line when there is no GPU, no python3 with a CUDA torch, no nvcc, or no bundle.
set -euo pipefail
cd "$(dirname "$0")/.."
stage="${1:-}"
case "$stage" in
  build|test|train|bench|cpu|all) ;;
  *) echo "usage: scripts/gpu-check.sh build|test|train|bench|cpu|all" >&2; exit 2 ;;
esac
deps="${TAEHV_DEPS:-deps-bundle}"
build="${GPU_CHECK_BUILD:-build-gpu}"
out="${GPU_CHECK_OUT:-runs/gpu-check}"
shared="${TAEHV_SHARED_DIR:-$PWD/../shared}"
report="$out/report.txt"
mkdir -p "$out"

fail() { echo "gpu-check: $*" | tee -a "$report" >&2; exit 1; }
note() { echo "$*" | tee -a "$report"; }
# seconds since $1 (date +%s.%N)
since() { python3 -c "import sys, time; print(f'{time.time() - float(sys.argv[1]):.1f}')" "$1"; }

need_gpu() {
  command -v nvidia-smi >/dev/null || fail "no nvidia-smi on PATH: this check needs a machine with an NVIDIA GPU"
  nvidia-smi -L 2>/dev/null | grep -q '^GPU ' || fail "nvidia-smi lists no GPU ($(nvidia-smi -L 2>&1 | head -n1))"
  command -v python3 >/dev/null || fail "no python3 on PATH: the check builds against the torch of the python3 on PATH"
  local probe
  probe=$(python3 -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.is_available())' 2>&1) ||
    fail "python3 ($(command -v python3)) cannot import torch: $(echo "$probe" | tail -n1)"
  read -r torch_version torch_cuda cuda_ok <<<"$probe"
  [[ "$torch_cuda" != "None" ]] || fail "python3's torch $torch_version is a CPU build: a CUDA torch is needed"
  [[ "$cuda_ok" == "True" ]] || fail "python3's torch $torch_version (CUDA $torch_cuda) sees no GPU (torch.cuda.is_available() is False)"
}

stage_build() {
  need_gpu
  [[ -f "$deps/taehv-deps.cmake" ]] ||
    fail "no dependency bundle at $deps (TAEHV_DEPS): make it on a Debian machine with scripts/bundle-deps.sh and bring it along"
  command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]] ||
    fail "no nvcc (neither on PATH nor /usr/local/cuda/bin): building against a CUDA torch needs the CUDA toolkit"
  note "== build ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
  note "device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -n1)"
  note "torch: $(python3 -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda, "NCCL", ".".join(map(str, torch.cuda.nccl.version())), "cuDNN", torch.backends.cudnn.version())')"
  note "python3: $(command -v python3) ($(python3 --version 2>&1)); cmake $(cmake --version | head -n1 | awk '{print $3}'); $(${CXX:-c++} --version | head -n1); nvcc $(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' || echo '?')"
  local generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  local start
  start=$(date +%s.%N)
  # CMAKE_POLICY_VERSION_MINIMUM: CMake 4 refuses package files that ask for a policy version below 3.5.
  cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DTAEHV_DEPS="$PWD/$deps" -DTAEHV_NCCL=ON \
    -DTAEHV_TRAINER_TESTS_ONLY=ON -DTAEHV_SHARED_DIR="$shared" -DCMAKE_POLICY_VERSION_MINIMUM=3.5 \
    >"$out/configure.log" 2>&1 || { tail -n 30 "$out/configure.log" >&2; fail "configure failed (log: $out/configure.log)"; }
  grep -E '^-- taehv' "$out/configure.log" | tee -a "$report"
  # Which way put libstdc++ ahead of libtorch with this compiler (cmake/TaehvStdcxxFirst.cmake), and the others' why.
  [[ -f "$build/taehv-stdcxx-probe.log" ]] &&
    grep -E '^(== |libraries, in order|refused|run:)' "$build/taehv-stdcxx-probe.log" | tee -a "$report"
  local targets=()
  [[ -n "${GPU_CHECK_TARGETS:-}" ]] && read -r -a targets <<<"--target $GPU_CHECK_TARGETS"
  local keep_going=()
  [[ ${#generator[@]} -gt 0 ]] && keep_going=(-- -k 0)  # every compile error in one go, not the first one's
  cmake --build "$build" -j"$(nproc)" "${targets[@]}" "${keep_going[@]}" >"$out/build.log" 2>&1 ||
    { grep -E 'error' "$out/build.log" | grep -v '^In file included' | head -n 40 >&2; fail "build failed (log: $out/build.log)"; }
  note "build: $(since "$start") s on $(nproc) cores; $("$build/bin/taehv-train" --version 2>&1 | tr '\n' ' ')"
}

stage_test() {
  need_gpu
  [[ -x "$build/bin/taehv-train" ]] || fail "no $build/bin/taehv-train: run the build stage first"
  note "== test ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
  # Reference vectors of variants whose files are not in $shared: those tests are left out, by name.
  local missing=()
  for v in taehv taew2_2 taew2_2_super taeltx_2 taeh3; do
    [[ -f "$shared/taehv-reference/$v.f16.safetensors" ]] || missing+=("$v")
  done
  local exclude=()
  if [[ ${#missing[@]} -gt 0 ]]; then
    local alternatives
    alternatives=$(IFS='|'; echo "${missing[*]}")
    exclude=(-E "ReferenceTest.*/(${alternatives})(_|$)")
    note "left out: reference tests of ${missing[*]} (their files are not in $shared/taehv-reference)"
    # Other tests that read those variants' files (taew2_2_super's and taeltx_2's streaming decoders).
    if [[ " ${missing[*]} " == *" taew2_2_super "* || " ${missing[*]} " == *" taeltx_2 "* ]]; then
      exclude=(-E "${exclude[1]}|^CommandsTest[.]StreamingEncodeDecodeMatchUpstreamStreamingTAEHV$")
      note "left out: CommandsTest.StreamingEncodeDecodeMatchUpstreamStreamingTAEHV (reads taew2_2_super and taeltx_2)"
    fi
  fi
  # The fuzz targets need scripts/setup.sh's clang with its libFuzzer and sanitizer runtimes, which a stock GPU image
  # lacks (its clang-16 has no libclang_rt.fuzzer): CI runs them.
  if [[ ${#exclude[@]} -gt 0 ]]; then exclude=(-E "${exclude[1]}|^Fuzz[.]"); else exclude=(-E "^Fuzz[.]"); fi
  note "left out: Fuzz.* (needs setup.sh's clang + libFuzzer pair; CI runs it)"
  local start
  start=$(date +%s.%N)
  cmake --build "$build" -j"$(nproc)" --target trainer_tests >"$out/build-tests.log" 2>&1 ||
    { grep -E 'error|Error' "$out/build-tests.log" | head -n 30 >&2; fail "building the tests failed (log: $out/build-tests.log)"; }
  note "test programs built in $(since "$start") s"
  start=$(date +%s.%N)
  local rc=0
  (cd "$build" && ctest -j "${GPU_CHECK_JOBS:-12}" --timeout 300 "${exclude[@]}" --output-on-failure) \
    >"$out/ctest.log" 2>&1 || rc=$?
  note "ctest: $(grep -E 'tests passed|tests failed' "$out/ctest.log" | tail -n1) in $(since "$start") s"
  grep -E '^\s+[0-9]+ - .*\((Failed|Timeout|Exception|SEGFAULT|Subprocess aborted)\)' "$out/ctest.log" | tee -a "$report" || true
  backtrace_first_crash
  return "$rc"
}

# The stack of the first test that died of SIGSEGV, run again alone under a debugger (the stock image has no gdb but
# cuda-gdb, which also debugs programs without GPU code), into the report.
backtrace_first_crash() {
  local name debugger
  name=$(grep -oE 'Test +#[0-9]+: [^ ]+ \.+\*\*\*Exception: SegFault' "$out/ctest.log" | head -n1 | awk '{print $3}')
  [[ -n "$name" ]] || return 0
  debugger=$(command -v gdb || command -v cuda-gdb || true)
  [[ -n "$debugger" ]] || { note "no gdb or cuda-gdb for the stack of $name"; return 0; }
  note "stack of $name ($(basename "$debugger")):"
  timeout 360 python3 - "$build" "$name" "$debugger" <<'PY' 2>&1 | head -n 50 | tee -a "$report" || true
import json, os, subprocess, sys
build, name, debugger = sys.argv[1:4]
tests = json.loads(subprocess.run(["ctest", "--show-only=json-v1"], cwd=build, capture_output=True, text=True,
                                  check=True).stdout)["tests"]
test = next(t for t in tests if t["name"] == name)
props = {p["name"]: p["value"] for p in test.get("properties", [])}
env = dict(os.environ)
env.update(e.split("=", 1) for e in props.get("ENVIRONMENT", []))
command = test["command"]
if command[0].endswith("/env"):  # gtest_discover_tests' executor: /usr/bin/env NAME=VALUE... PROGRAM ARGS
    command = command[1:]
    while command and "=" in command[0] and not command[0].startswith("/"):
        env.update([command.pop(0).split("=", 1)])
run = subprocess.run([debugger, "-batch", "-ex", "run", "-ex", "bt", "--args"] + command,
                     cwd=props.get("WORKING_DIRECTORY", build), env=env, capture_output=True, text=True, timeout=170)
frames = [l for l in run.stdout.splitlines() if l.startswith("#")]
print("\n".join(frames[:25]) if frames else "(no stack: the test did not crash under the debugger)")
# Which library each std::filesystem call of the program was bound to (libtorch may export its own copy).
env["LD_DEBUG"] = "bindings"
run = subprocess.run(command, cwd=props.get("WORKING_DIRECTORY", build), env=env, capture_output=True,
                     text=True, timeout=170)
bound = sorted({l.split("binding file ", 1)[1].split(": normal symbol")[0] + " " + l.split("`")[1]
                for l in run.stderr.splitlines() if "binding file" in l and "_ZNSt10filesystem" in l})
print("bindings of std::filesystem:\n" + "\n".join(bound[:15]) if bound else "no std::filesystem binding seen")
needed = subprocess.run(["readelf", "-d", command[0]], capture_output=True, text=True).stdout
print("first libraries: " + " ".join([l.split("[")[1].rstrip("]") for l in needed.splitlines() if "NEEDED" in l][:4]))
PY
}

# metrics.jsonl of a run folder -> one line of figures
summarize_run() {
  python3 - "$1" <<'PY'
import json, sys, os
rows = [json.loads(l) for l in open(os.path.join(sys.argv[1], "metrics.jsonl")) if l.strip()]
train = [r for r in rows if "psnr" in r]
evals = [r for r in rows if "eval_psnr" in r]
last = train[-1]
text = f"last step {last['step']}, training PSNR {last['psnr']:.2f} dB, loss {last['loss']:.5f}"
if evals:
    e = evals[-1]
    text += f"; eval PSNR {e['eval_psnr']:.2f} dB, SSIM {e['eval_ssim']:.3f} at step {e['step']}"
print(text)
PY
}

# train_run NAME NPROC EXTRA... : the quickstart on the GPU under taehv-run; its log in $out/NAME.log
train_run() {
  local name=$1 nproc=$2
  shift 2
  local start rc=0
  start=$(date +%s.%N)
  timeout 240 "$build/bin/taehv-run" --standalone --nproc-per-node "$nproc" "${binding[@]}" -- \
    "$PWD/$build/bin/taehv-train" --config examples/configs/quickstart.yaml --set output.dir="$out/$name" \
    --set train.device=cuda:0 --set eval.every=100 --set checkpoint.every=100 "$@" >"$out/$name.log" 2>&1 || rc=$?
  note "$name: exit $rc in $(since "$start") s: $( [[ $rc -eq 0 ]] && summarize_run "$out/$name" || tail -n 3 "$out/$name.log" | tr '\n' ' ')"
  return "$rc"
}

stage_train() {
  need_gpu
  [[ -x "$build/bin/taehv-run" ]] || fail "no $build/bin/taehv-run: run the build stage first"
  note "== train ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
  rm -rf "$out/ws1" "$out/ws1-fp32" "$out/ws2-nccl" "$out/ws2-gloo"
  local binding=()
  # World size 1 (c10d needs no process group there), 200 steps with a checkpoint at 100, then resumed to 300; on the
  # GPU train.bf16 defaults to true: bf16 autocast with channels_last activations.
  train_run ws1 1 --set train.steps=200 || fail "world size 1 training failed (log: $out/ws1.log)"
  train_run ws1 1 --set train.steps=300 --resume latest || fail "resume failed (log: $out/ws1.log)"
  grep -m1 -iE 'resum' "$out/ws1.log" | tee -a "$report" || true
  # fp32 (contiguous activations).
  train_run ws1-fp32 1 --set train.steps=200 --set train.bf16=false ||
    fail "fp32 training failed (log: $out/ws1-fp32.log)"
  # Two processes on the one GPU: NCCL first; NCCL refuses two ranks on one device on some versions, then Gloo.
  binding=(--gpu-binding none)
  if ! train_run ws2-nccl 2 --set train.steps=200 --set dist.backend=nccl; then
    grep -m2 -iE 'nccl|duplicate' "$out/ws2-nccl.log" | tee -a "$report" || true
    train_run ws2-gloo 2 --set train.steps=200 --set dist.backend=gloo || fail "2 processes over Gloo failed too"
  fi
}

# bench_line LABEL LOG : the figures of one bench run
bench_line() {
  python3 - "$1" "$2" "$peak" <<'PY'
import sys
label, log, peak = sys.argv[1], sys.argv[2], float(sys.argv[3])
vals = {}
for line in open(log):
    for item in line.split():
        key, eq, value = item.partition("=")
        if eq:
            try:
                vals[key] = float(value)
            except ValueError:
                pass
if "frames_per_s" not in vals:
    print(f"{label}: no result (log: {log})")
    sys.exit(0)
text = f"{label}: {vals['frames_per_s']:.1f} frames/s, {vals['step_s'] * 1000:.1f} ms/step, peak GPU {vals.get('peak_gpu_mb', float('nan')):.0f} MiB"
if "optimizer_s" in vals:
    text += f" (AdamW {vals['optimizer_s'] * 1000:.1f} ms)"
if "achieved_tflops" in vals:
    text += f", {vals['achieved_tflops']:.1f} TFLOP/s"
    if peak > 0:
        text += f" = {100 * vals['achieved_tflops'] / peak:.1f}% of the bf16 peak"
print(text)
PY
}

stage_bench() {
  need_gpu
  [[ -x "$build/bin/taehv-train" ]] || fail "no $build/bin/taehv-train: run the build stage first"
  note "== bench ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
  local name
  name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1)
  # Dense bf16 peak (NVIDIA's datasheets): H100 SXM and H200 989 TFLOP/s, H100 PCIe 756; else unknown (no share).
  peak=0
  case "$name" in
    *H200*) peak=989 ;;
    *H100*PCIe*) peak=756 ;;
    *H100*) peak=989 ;;
  esac
  local shape=(--variant taehv --batch "${GPU_CHECK_BATCH:-4}" --frames 12 --size "${GPU_CHECK_SIZE:-256}")
  note "shape: ${shape[*]}, ${GPU_CHECK_STEPS:-10} timed steps after 3 warm-up steps; bf16 peak taken as $peak TFLOP/s ($name)"
  # bf16-cl: bf16 with channels_last activations (the trainer's layout under bf16), both sides.
  for run in ${GPU_CHECK_PRECISIONS:-fp32 bf16 bf16-cl}; do
    local precision=${run%-cl} format=contiguous
    [[ $run == *-cl ]] && format=channels_last
    local same=(--device cuda --precision "$precision" --memory-format "$format")
    timeout 180 "$build/bin/taehv-train" bench "${shape[@]}" --steps "${GPU_CHECK_STEPS:-10}" --warmup 3 "${same[@]}" \
      >"$out/bench-cpp-$run.log" 2>&1 || true
    bench_line "taehv-train bench $precision $format" "$out/bench-cpp-$run.log" | tee -a "$report"
    if [[ $run == bf16 ]]; then
      # The same step with torch::optim::AdamW (about ten tensor operations per parameter): the optimizer's share.
      timeout 180 "$build/bin/taehv-train" bench "${shape[@]}" --steps "${GPU_CHECK_STEPS:-10}" --warmup 3 \
        "${same[@]}" --optimizer torch >"$out/bench-cpp-$run-torch-adamw.log" 2>&1 || true
      bench_line "taehv-train bench $precision $format --optimizer torch" "$out/bench-cpp-$run-torch-adamw.log" |
        tee -a "$report"
    fi
    for mode in ${GPU_CHECK_MODES:-eager compile}; do
      local flag=()
      [[ $mode == compile ]] && flag=(--compile)
      (cd bench/model && timeout 300 python3 train_loop_py.py "${shape[@]}" --steps "${GPU_CHECK_STEPS:-10}" \
        --warmup 3 "${same[@]}" "${flag[@]}") >"$out/bench-py-$mode-$run.log" 2>&1 || true
      bench_line "PyTorch $mode $precision $format" "$out/bench-py-$mode-$run.log" | tee -a "$report"
    done
  done
}

# Issue 40 on this machine's CPU, pinned to two cores on distinct physical cores (the main job's 2-core machine):
# the main job's step (2 ranks x 1 thread, quickstart.yaml, phase times, means of the logged windows after step 10),
# then the bare step in the precision the job chose (1 thread, the trainer's layout), the job's step against the peak
# the bench measures in its process, and fp32 Winograd against oneDNN's direct convolutions in interleaved pairs.
stage_cpu() {
  [[ -x "$build/bin/taehv-train" ]] || fail "no $build/bin/taehv-train: run the build stage first"
  command -v taskset >/dev/null || fail "no taskset: the CPU figures are taken on two pinned cores"
  note "== cpu ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
  local cores flags
  cores=$(lscpu -p=CPU,CORE | grep -v '^#' | awk -F, '!seen[$2]++ {print $1}' | head -n 2 | paste -sd, -)
  flags=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | { grep -xE 'avx512f|avx512_bf16|amx_bf16' || true; } | paste -sd' ' -)
  note "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs), family $(grep -m1 'cpu family' /proc/cpuinfo |
    cut -d: -f2 | xargs) model $(grep -m1 '^model' /proc/cpuinfo | cut -d: -f2 | xargs); ${flags:-no AVX-512}; pinned to CPUs $cores"
  rm -rf "$out/cpu" && mkdir -p "$out/cpu"
  local pin=(taskset -c "$cores") shape=(--batch 4 --frames 12 --size 32 --threads 1) precision
  local rc=0
  TAEHV_DEVICE=cpu timeout 150 "${pin[@]}" "$build/bin/taehv-run" --standalone --nproc-per-node 2 --gpu-binding none \
    -- "$PWD/$build/bin/taehv-train" --config examples/configs/quickstart.yaml --set train.device=cpu \
    --set train.threads=1 --set train.steps=50 --set train.max_minutes=0 --set log.phase_times=true \
    --set eval.every=0 --set log.preview_every=0 --set checkpoint.every=0 --set output.dir="$out/cpu/job" \
    >"$out/cpu/job.log" 2>&1 || rc=$?
  grep -m1 -E 'CPU precision' "$out/cpu/job.log" | tee -a "$report"
  # The bare step in the precision the job's train.cpu_precision auto chose (its first line says which).
  precision=$(grep -m1 -oE 'CPU precision (fp32|bf16)' "$out/cpu/job.log" | awk '{print $3}' || true)
  timeout 120 "${pin[@]}" "$build/bin/taehv-train" bench "${shape[@]}" --precision "${precision:-fp32}" --steps 10 \
    --warmup 2 >"$out/cpu/bare.log" 2>&1 || true
  grep -E '^(bench|peak|phase total|frames_per_s)' "$out/cpu/bare.log" | tee -a "$report"
  python3 - "$out/cpu/job/metrics.jsonl" "$out/cpu/bare.log" "$rc" "${precision:-fp32}" <<'PY' | tee -a "$report"
import json, re, statistics, sys
metrics, bare, rc, precision = sys.argv[1:5]
try:
    rows = [r for r in map(json.loads, filter(str.strip, open(metrics))) if "step_s" in r and r["step"] >= 10]
except OSError:
    rows = []
if rc != "0" or not rows:
    sys.exit(print(f"main job: exit {rc}, no step figures ({metrics})"))
# the peak of the precision the job ran in, measured in the bare step's process
bare_text = open(bare).read()
peak = re.search(precision + r"_peak_gflops=([0-9.]+)", bare_text)
flop = re.search(r"model_gflop_per_step=([0-9.]+)", bare_text)
step = statistics.mean(r["step_s"] for r in rows)
phases = " ".join(f"{k[6:-2]} {statistics.mean(r.get(k, 0) for r in rows):.3f}" for k in
                  ("phase_forward_s", "phase_backward_s", "phase_exchange_s", "phase_update_s"))
text = f"main job: step {step:.3f} s (mean of {len(rows)} windows from step 10; {phases})"
if peak and flop:
    text += (f"; {float(flop[1]):.2f} GFLOP / step = {float(flop[1]) / step:.0f} GFLOP/s = "
             f"{100 * float(flop[1]) / step / float(peak[1]):.1f}% of the {precision} peak {float(peak[1]):.0f}")
print(text)
PY
  local pair conv
  for pair in 1 2 3; do
    for conv in direct winograd; do
      timeout 60 "${pin[@]}" "$build/bin/taehv-train" bench "${shape[@]}" --precision fp32 --steps 6 --warmup 2 \
        --conv "$conv" >"$out/cpu/fp32-$conv-$pair.log" 2>&1 || true
      note "fp32 --conv $conv, pair $pair: $(grep -E '^frames_per_s' "$out/cpu/fp32-$conv-$pair.log" || echo 'no result')"
    done
  done
}

case "$stage" in
  build) stage_build ;;
  cpu) stage_cpu ;;
  test) stage_test ;;
  train) stage_train ;;
  bench) stage_bench ;;
  all)
    stage_build
    stage_test || true
    stage_train
    stage_bench
    ;;
esac
echo "gpu-check: report in $report"
