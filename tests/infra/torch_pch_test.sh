#!/usr/bin/env bash
# TorchPch.TrainerFilesCompileFromThePrecompiledHeader (cmake/TaehvTorchPch.cmake): GCC takes a precompiled header
# only where the compile's flags and macros match the header's, and otherwise compiles from the header text without a
# word but a warning, so a flag added to one target or file would quietly bring its ~13 s a file back. This recompiles
# (-fsyntax-only) with the build command of one file of each kind and GCC's -H, which prints `! <file>.gch` for a
# precompiled header it used: a library file (-fPIC), one with flags of its own (-ffp-contract=fast) and a test
# (-fPIE). The file itself is swapped for an empty one: whether GCC takes the header depends on the command alone, and
# the file's own code would only add seconds. As a control, the first with -fopenmp added must not use it (the check
# can tell the two apart); -Werror=invalid-pch stops that compile where GCC refuses the header.
# Usage: torch_pch_test.sh BUILD_DIR
set -uo pipefail
build=$(cd "$1" && pwd)
cd "$build" || exit 1
compiler=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' CMakeCache.txt)
[ -n "$compiler" ] || { echo "FAIL $build has no CMAKE_CXX_COMPILER in its CMakeCache.txt"; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
: >"$work/empty.cc"

# compile OBJECT [EXTRA FLAG]: GCC's -H lines of OBJECT's own build command on an empty file, minus the launcher, the
# dependency file and the object.
compile() {
  local cmd
  cmd=$(ninja -t commands "$1" | tail -1)
  case "$cmd" in *" -c "*) ;; *) echo "no build command for $1"; return ;; esac
  cmd=${cmd#*"$compiler" }  # /usr/bin/env CCACHE_SLOPPINESS=... ccache COMPILER ARGS -> ARGS
  cmd=$(sed -E 's/ -MD -MT [^ ]+ -MF [^ ]+//; s/ -o [^ ]+ -c [^ ]+$//' <<<"$cmd")
  eval "\"\$compiler\" $cmd -Werror=invalid-pch -fsyntax-only -H ${2:-} -c \"\$work/empty.cc\"" 2>&1 |
    grep -E '^[!x] |cmake_pch|error' | head -5
}

failed=0
for obj in trainer/train/CMakeFiles/taehv_train.dir/src/commands.cc.o \
  trainer/model/CMakeFiles/taehv_model.dir/src/winograd_grad.cc.o \
  tests/trainer/model/CMakeFiles/taehv_model_test.dir/taehv_test.cc.o; do
  out=$(compile "$obj")
  if grep -q '^! .*cmake_pch\.hxx\.gch' <<<"$out"; then
    echo "ok $obj: $(grep '^! ' <<<"$out" | head -1)"
  else
    echo "FAIL $obj does not compile from the precompiled header:"
    echo "$out"
    failed=$((failed + 1))
  fi
done
out=$(compile trainer/train/CMakeFiles/taehv_train.dir/src/commands.cc.o -fopenmp)
if grep -q '^! .*cmake_pch\.hxx\.gch' <<<"$out"; then
  echo "FAIL the control (-fopenmp added) used the precompiled header: the check cannot tell"
  failed=$((failed + 1))
else
  echo "ok control: with -fopenmp GCC does not use it ($(grep -m1 -E '^x |cmake_pch' <<<"$out"))"
fi
echo "4 checks, $((4 - failed)) passed, $failed failed"
[ "$failed" -eq 0 ]
