#!/usr/bin/env bash
# The GPU build, compiled, linked and run without a GPU (ctest label `cuda`):
#   1. scripts/build-cuda.sh builds taehv-train and its suites against torch 2.14.1's CUDA libtorch + NCCL 2.30;
#   2. the binary resolves libtorch_cuda and libnccl (ldd);
#   3. --version of the CUDA and of the CPU build name their libtorch, CUDA and NCCL;
#   4. the CUDA build runs the trainer's unit tests and three multi-process trainings (Gloo data parallel, a bitwise
#      resume, ZeRO stages 1-2 against stage 0) on the CPU: the rest of its suites are the same sources the CPU
#      build runs (all 207 took 19 min here, and CI's whole run must stay within its 90 minutes);
#   5. train.device=cuda and an NCCL process group fail at once (exit 2, one line) before any rendezvous.
# Usage: cuda_build_test.sh SOURCE_DIR CPU_BUILD_DIR [CUDA_BUILD_DIR]
set -uo pipefail
src=$1
cpu_build=$2
cuda_build=${3:-$src/build-cuda}
passed=0
failed=0
record() {  # record NAME OK(1|0): counts and prints one result
  if [ "$2" -eq 1 ]; then
    echo "PASS $1"
    passed=$((passed + 1))
  else
    echo "FAIL $1"
    failed=$((failed + 1))
  fi
}
check() {  # check NAME COMMAND...: runs the command and records whether it succeeded
  local name=$1
  shift
  if "$@"; then record "$name" 1; else record "$name" 0; fi
}
finish() {
  echo "$passed passed, $failed failed"
  [ "$failed" -eq 0 ]
  exit
}

if ! bash "$src/scripts/build-cuda.sh" "$cuda_build"; then
  record "scripts/build-cuda.sh (configure, compile or link; its output is above)" 0
  finish
fi
record "scripts/build-cuda.sh" 1
bin=$cuda_build/bin/taehv-train

links() {  # links LIBRARY: ldd resolves it to a file
  ldd "$bin" | grep -E "^\s*$1 => /" >/dev/null || { echo "ldd $bin:"; ldd "$bin" | grep -E "$1|not found"; return 1; }
}
check "ldd resolves libtorch_cuda.so" links libtorch_cuda.so
check "ldd resolves libnccl.so.2" links 'libnccl\.so\.2'
check "ldd finds every library" bash -c "! ldd '$bin' | grep -q 'not found'"

cuda_version=$("$bin" --version)
echo "$cuda_version"
check "CUDA build --version: libtorch 2.14.1" grep -qx "libtorch 2.14.1" <<<"$cuda_version"
check "CUDA build --version: CUDA 13.0" grep -qx "CUDA 13.0" <<<"$cuda_version"
check "CUDA build --version: NCCL 2.30.7" grep -qx "NCCL 2.30.7" <<<"$cuda_version"
cpu_version=$("$cpu_build/bin/taehv-train" --version)
echo "$cpu_version"
check "CPU build --version: libtorch 2.13.0" grep -qx "libtorch 2.13.0" <<<"$cpu_version"
check "CPU build --version: CUDA none" grep -qx "CUDA none" <<<"$cpu_version"
check "CPU build --version: NCCL none" grep -qx "NCCL none" <<<"$cpu_version"

check "CUDA build runs the trainer's unit tests on the CPU (ctest -L unit in the CUDA build)" \
  ctest --test-dir "$cuda_build" --output-on-failure --timeout 600 -L unit
trainings='^(DataParallel\.TwoAndThreeRanksMatchOneRankOnTheConcatenatedBatch'
trainings+='|Resume\.StopResumeAndSigtermResumeAreBitwiseEqualToAStraightRun'
trainings+='|Zero\.StagesOneAndTwoMatchStageZeroWithAccumulation)$'
ran=$(ctest --test-dir "$cuda_build" -N -R "$trainings" | grep -c "Test *#")
check "CUDA build lists the 3 multi-process trainings (found $ran)" test "$ran" -eq 3
check "CUDA build runs 3 multi-process trainings on the CPU (Gloo, resume, ZeRO)" \
  ctest --test-dir "$cuda_build" --output-on-failure --timeout 600 -R "$trainings"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# fails_fast NAME SECONDS EXPECTED_TEXT ENV... -- ARGS...: taehv-train (rank 0 of 2, no peer ever comes) must exit
# 2 within SECONDS with EXPECTED_TEXT on stderr: a rendezvous would wait for rank 1 for the whole dist timeout.
fails_fast() {
  local name=$1 limit=$2 expected=$3
  shift 3
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  local start end rc
  start=$(date +%s)
  env "${envs[@]}" timeout 120 "$bin" "$@" --set output.dir="$work/out" >"$work/out.log" 2>"$work/err.log"
  rc=$?
  end=$(date +%s)
  cat "$work/err.log"
  local ok=1
  [ "$rc" -eq 2 ] || { echo "  exit code $rc, expected 2"; ok=0; }
  [ $((end - start)) -le "$limit" ] || { echo "  took $((end - start)) s, more than $limit s"; ok=0; }
  grep -q -- "$expected" "$work/err.log" || { echo "  stderr lacks: $expected"; ok=0; }
  [ "$(grep -c . "$work/err.log")" -eq 1 ] || { echo "  stderr is not one line"; ok=0; }
  record "$name" "$ok"
}
port=$((20000 + RANDOM % 20000))
dist_env=(RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 "MASTER_PORT=$port")
fails_fast "train.device=cuda without a GPU: exit 2 before the rendezvous" 30 "no GPU is visible" \
  "${dist_env[@]}" -- --config "$src/examples/configs/quickstart.yaml" --set train.device=cuda
fails_fast "dist.backend=nccl on the CPU: exit 2 before the rendezvous" 30 "dist.backend nccl needs a CUDA" \
  "${dist_env[@]}" -- --config "$src/examples/configs/quickstart.yaml" --set train.device=cpu --set dist.backend=nccl
finish
