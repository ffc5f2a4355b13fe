#!/usr/bin/env bash
# Every libFuzzer target, built and run for a bounded time (ctest label `fuzz`, Fuzz.EveryTargetRunsCleanForItsBudget):
#   1. finds clang++-N with libFuzzer and the sanitizer runtimes (N as scripts/setup.sh picks it); none is a failure;
#   2. configures BUILD_DIR/fuzz with that clang and -DTAEHV_FUZZ=ON, with BUILD_DIR's libtorch, bundle and trainer
#      settings (only configured: the fuzz targets need no libtorch), and builds only the fuzz targets;
#   3. runs each for SECONDS (one per core at a time) on a fresh corpus folder plus its seeds, under ASan, UBSan
#      (halting) and LeakSanitizer, and prints `fuzz TARGET: N execs in S s, corpus C inputs, 0 crashes` from
#      libFuzzer's final stats.
# Fails on a crash, a leak, UB, a slow input (-timeout), too much memory, or a fuzz target of the build that the
# table below does not run. A failing input is kept in BUILD_DIR/fuzz/artifacts/ with the command that replays it.
# Usage: fuzz_test.sh SOURCE_DIR BUILD_DIR [SECONDS per target, default 30]
set -uo pipefail
src=$(cd "$1" && pwd)
build=$(cd "$2" && pwd)
seconds=${3:-30}
fuzz_build=$build/fuzz

fail() {
  echo "FAIL $*"
  exit 1
}
cached() {  # cached NAME: NAME's value in BUILD_DIR's CMake cache ("" when unset)
  sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt"
}
[ -f "$build/CMakeCache.txt" ] || fail "$build is not a configured build (no CMakeCache.txt)"

# The table: target, -max_len (room for a whole header, config or manifest, or two 4 KiB frames), seed folders
# (read, never written; a folder that does not exist is an error).
with_trainer=$(cached TAEHV_WITH_TRAINER)
targets=(elf_check wire)
case "$with_trainer" in OFF | FALSE | NO | 0 | off) ;; *) targets+=(safetensors checkpoint config) ;; esac
declare -A max_len=([elf_check]=8192 [wire]=8192 [safetensors]=2048 [checkpoint]=1024 [config]=4096)
declare -A seeds=(
  [elf_check]="@elf"  # a shared object compiled below, and BUILD_DIR's plugins when they are built
  [wire]="$src/tests/core/group/wire_fuzz_corpus"
  [safetensors]="$src/tests/trainer/model/fuzz_corpus"
  [checkpoint]="$src/tests/trainer/train/checkpoint_fuzz_corpus"
  [config]="$src/tests/trainer/train/config_fuzz_corpus $src/examples/configs"
)

# 1. clang with libFuzzer: scripts/setup.sh installs clang-N, libfuzzer-N-dev and libclang-rt-N-dev.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
clang=""
for v in 19 18 17 16 15 14; do
  if command -v "clang++-$v" >/dev/null; then clang=$(command -v "clang++-$v"); break; fi
done
[ -n "$clang" ] || fail "no clang++-N (N = 14..19) on PATH: run scripts/setup.sh (it installs clang-N," \
  "libfuzzer-N-dev and libclang-rt-N-dev)"
printf '#include <cstddef>\n#include <cstdint>\n%s\n' \
  'extern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }' >"$work/probe.cc"
"$clang" -fsanitize=fuzzer,address,undefined "$work/probe.cc" -o "$work/probe" 2>"$work/probe.log" ||
  fail "$clang cannot link a libFuzzer target ($(head -c 300 "$work/probe.log")): install libfuzzer-N-dev and" \
    "libclang-rt-N-dev of the same N (scripts/setup.sh does)"
echo "clang: $clang ($("$clang" --version | head -1))"

# 2. Configure and build only the fuzz targets.
if [ -f "$fuzz_build/CMakeCache.txt" ] &&
  ! grep -qx "CMAKE_CXX_COMPILER:[A-Z]*=$clang" "$fuzz_build/CMakeCache.txt"; then
  rm -rf "$fuzz_build"  # configured with another compiler: CMake cannot switch a build folder's compiler
fi
start=$(date +%s)
cmake -S "$src" -B "$fuzz_build" -G Ninja -DCMAKE_CXX_COMPILER="$clang" -DCMAKE_BUILD_TYPE=Release -DTAEHV_FUZZ=ON \
  -DTAEHV_WITH_TRAINER="${with_trainer:-ON}" -DTorch_DIR="$(cached Torch_DIR)" -DTAEHV_DEPS="$(cached TAEHV_DEPS)" \
  >"$work/configure.log" 2>&1 || { cat "$work/configure.log"; fail "configuring $fuzz_build"; }
for t in $(ninja -C "$fuzz_build" -t targets all | sed -n 's/^\(taehv_[a-z_]*_fuzz\): .*/\1/p' | sort -u); do
  name=${t#taehv_}
  name=${name%_fuzz}
  [ -n "${max_len[$name]:-}" ] || fail "$t is built with TAEHV_FUZZ=ON but not run: add it to tests/fuzz_test.sh"
done
names=()
for t in "${targets[@]}"; do names+=("taehv_${t}_fuzz"); done
cmake --build "$fuzz_build" -j2 --target "${names[@]}" >"$work/build.log" 2>&1 ||
  { tail -40 "$work/build.log"; fail "building ${names[*]}"; }
echo "configure and build: $(($(date +%s) - start)) s"

# 3. Run each target. UBSan only reports by default; halt_on_error makes a finding a failure.
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
mkdir -p "$fuzz_build/artifacts"
"$clang" -shared -fPIC -x c++ - -o "$work/seed.so" <<<'extern "C" int seed() { return 1; }' ||
  fail "compiling a shared object to seed the ELF check"
run_target() {  # run_target TARGET: its libFuzzer run; prints its one line (or its log's tail and a FAIL line)
  local t=$1 bin=$fuzz_build/tests/taehv_${1}_fuzz d dirs=() corpus=$work/corpus-$1 t0 rc took execs inputs artifact
  for d in ${seeds[$t]}; do
    [ "$d" = "@elf" ] && d=$work/elf-seeds
    [ -d "$d" ] || { echo "FAIL the seed folder $d of $t is missing"; return 1; }
    dirs+=("$d")
  done
  mkdir -p "$corpus"
  t0=$(date +%s)
  timeout -k 10 $((seconds + 120)) "$bin" -max_total_time="$seconds" -max_len="${max_len[$t]}" -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$fuzz_build/artifacts/$t-" "$corpus" "${dirs[@]}" \
    >"$work/$t.log" 2>&1
  rc=$?
  took=$(($(date +%s) - t0))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$t.log" | tail -1)
  inputs=$(grep -o 'corp: [0-9]*' "$work/$t.log" | tail -1 | cut -d' ' -f2)
  if [ "$rc" -eq 0 ] && [ -n "$execs" ] && [ "$execs" -gt 0 ]; then
    echo "fuzz $t: $execs execs in $took s, corpus ${inputs:-?} inputs, 0 crashes"
  else
    tail -60 "$work/$t.log"
    artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$work/$t.log" | tail -1)
    echo "FAIL fuzz $t: exit $rc after ${execs:-?} execs in $took s${artifact:+; replay: $bin $artifact}"
    return 1
  fi
}

# One target a core at once (each libFuzzer run is one process on one core); each one's lines are printed whole, in the
# table's order, once all have ended.
mkdir -p "$work/elf-seeds" && cp "$work/seed.so" "$work/elf-seeds/"
cp "$build"/lib/taehv/plugins/*.so "$work/elf-seeds/" 2>/dev/null
jobs_at_once=$(nproc)
running=0
for t in "${targets[@]}"; do
  if [ "$running" -ge "$jobs_at_once" ]; then
    wait -n
    running=$((running - 1))
  fi
  (run_target "$t" >"$work/$t.out" 2>&1; echo $? >"$work/$t.rc") &
  running=$((running + 1))
done
wait
failed=0
for t in "${targets[@]}"; do
  cat "$work/$t.out"
  [ "$(cat "$work/$t.rc" 2>/dev/null)" = 0 ] || failed=$((failed + 1))
done
echo "${#targets[@]} fuzz targets run, $failed failed ($jobs_at_once at a time)"
[ "$failed" -eq 0 ]
