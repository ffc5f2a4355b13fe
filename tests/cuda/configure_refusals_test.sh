#!/usr/bin/env bash
# Configure-time refusals of an unusable libtorch (cmake/TaehvTorch.cmake, trainer/train/CMakeLists.txt) or dependency
# bundle (cmake/TaehvDeps.cmake): each is one
# message naming what was found and what is needed, and configure fails. The unusable libtorches are stand-ins made
# here (a TorchConfig.cmake saying what such a libtorch's says: its version, its ABI flag, its headers), because
# none of them can be installed on this machine; the NCCL case uses the real CPU torch of .venv/.
# Usage: configure_refusals_test.sh SOURCE_DIR [REAL_TORCH_DIR]
set -uo pipefail
src=$1
real_torch=${2:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passed=0 failed=0

# fake NAME VERSION CXX_FLAGS WITH_C10D: a libtorch package under $work/NAME
fake() {
  local root=$work/$1
  mkdir -p "$root/share/cmake/Torch" "$root/include/torch/csrc/distributed/c10d" "$root/lib"
  if [ "$4" = yes ]; then
    touch "$root/include/torch/csrc/distributed/c10d/TCPStore.hpp" "$root/include/torch/csrc/distributed/c10d/ProcessGroupGloo.hpp"
  fi
  cat > "$root/share/cmake/Torch/TorchConfigVersion.cmake" <<CFG
set(PACKAGE_VERSION "$2")
set(PACKAGE_VERSION_COMPATIBLE TRUE)
CFG
  cat > "$root/share/cmake/Torch/TorchConfig.cmake" <<CFG
set(TORCH_FOUND TRUE)
set(TORCH_INCLUDE_DIRS "$root/include")
set(TORCH_LIBRARIES "")
set(TORCH_CXX_FLAGS "$3")
CFG
  echo "$root/share/cmake/Torch"
}

# expect NAME TORCH_DIR EXTRA_ARGS -- NEEDLE...: configure fails and its output holds every needle
expect() {
  local name=$1 torch_dir=$2 extra=$3
  shift 4
  local out rc
  out=$(${wrap:-} cmake -S "$src" -B "$work/build-$name" -G Ninja -DTorch_DIR="$torch_dir" $extra 2>&1)
  rc=$?
  local ok=1 flat
  flat=$(tr -s '[:space:]' ' ' <<<"$out")  # CMake wraps its messages
  [ $rc -ne 0 ] || { echo "FAIL $name: configure succeeded"; ok=0; }
  for needle in "$@"; do
    grep -qF -- "$needle" <<<"$flat" || { echo "FAIL $name: no '$needle' in the configure output"; ok=0; }
  done
  local errors
  errors=$(grep -c "CMake Error" <<<"$out")
  [ "$errors" -eq 1 ] || { echo "FAIL $name: $errors CMake errors (one message expected)"; ok=0; }
  if [ $ok = 1 ]; then
    echo "ok   $name"; passed=$((passed + 1))
  else
    sed 's/^/     | /' <<<"$out" | tail -15; failed=$((failed + 1))
  fi
}

expect too-old "$(fake old 1.13.1 "-D_GLIBCXX_USE_CXX11_ABI=1" yes)" "" -- \
  "is 1.13.1" "needs libtorch >= 2.9" "scripts/setup.sh"
expect pre-cxx11-abi "$(fake preabi 2.9.0 "-D_GLIBCXX_USE_CXX11_ABI=0" yes)" "" -- \
  "pre-C++11 libstdc++ ABI" "_GLIBCXX_USE_CXX11_ABI=0" "cxx11-ABI libtorch"
expect no-c10d "$(fake noc10d 2.13.0 "-D_GLIBCXX_USE_CXX11_ABI=1" no)" "" -- \
  "has no c10d" "TCPStore.hpp" "USE_DISTRIBUTED=OFF"
expect no-torch "$work/nowhere" "" -- "No libtorch found" "-DTAEHV_WITH_TRAINER=OFF"
if [ -n "$real_torch" ] && [ -d "$real_torch" ]; then
  expect nccl-on-cpu-torch "$real_torch" "-DTAEHV_NCCL=ON" -- "TAEHV_NCCL=ON" "has no NCCL backend"
else
  echo "FAIL nccl-on-cpu-torch: no real torch given ($real_torch)"; failed=$((failed + 1))
fi
# Without -DTorch_DIR and .venv/, the torch of the python3 on PATH: a tree without .venv/ (the tracked files) and a
# python3 on PATH that has no torch, or an old one.
mkdir -p "$work/tree"
git -C "$src" ls-files -z | (cd "$src" && xargs -0 cp --parents -t "$work/tree")
mkdir -p "$work/bin-notorch" "$work/bin-oldtorch"
printf '#!/bin/sh\necho "ModuleNotFoundError: No module named '"'"'torch'"'"'" >&2\nexit 1\n' >"$work/bin-notorch/python3"
old_prefix=$(dirname "$(fake pyold 2.8.0 "-D_GLIBCXX_USE_CXX11_ABI=1" yes)")  # torch.utils.cmake_prefix_path
printf '#!/bin/sh\necho %s\necho 2.8.0+cu128\n' "$old_prefix" >"$work/bin-oldtorch/python3"
chmod +x "$work/bin-notorch/python3" "$work/bin-oldtorch/python3"
tree_src=$src
src=$work/tree
wrap="env PATH=$work/bin-notorch:$PATH" expect python3-without-torch "" "" -- \
  "The python3 on PATH ($work/bin-notorch/python3) has no usable torch" "No module named 'torch'" \
  "Install torch >= 2.9 into it"
wrap="env PATH=$work/bin-oldtorch:$PATH" expect python3-with-old-torch "" "" -- "is 2.8.0" "needs libtorch >= 2.9"
src=$tree_src
# The offline bundle (cmake/TaehvDeps.cmake): not a bundle, another CPU's, one needing a newer glibc.
mkdir -p "$work/bundle-arm" "$work/bundle-glibc"
printf 'set(TAEHV_DEPS_FORMAT 1)\nset(TAEHV_DEPS_PROCESSOR "aarch64")\nset(TAEHV_DEPS_GLIBC "2.36")\n' \
  >"$work/bundle-arm/taehv-deps.cmake"
printf 'set(TAEHV_DEPS_FORMAT 1)\nset(TAEHV_DEPS_PROCESSOR "%s")\nset(TAEHV_DEPS_GLIBC "9.99")\n' "$(uname -m)" \
  >"$work/bundle-glibc/taehv-deps.cmake"
expect bundle-missing "$real_torch" "-DTAEHV_DEPS=$work/nowhere" -- "is not a dependency bundle" "scripts/bundle-deps.sh"
expect bundle-other-cpu "$real_torch" "-DTAEHV_DEPS=$work/bundle-arm" -- "holds aarch64 libraries" \
  "this machine is $(uname -m)"
expect bundle-newer-glibc "$real_torch" "-DTAEHV_DEPS=$work/bundle-glibc" -- "made against glibc 9.99" \
  "on which its libraries do not load"

# A CUDA libtorch (lib/libtorch_cuda.so) where no CUDA toolkit can be found: this machine has one, so the test
# hides it in a private mount namespace (tmpfs over the toolkit's folders and nvcc's), as a machine without it.
cuda=$(fake cuda 2.14.1 "-D_GLIBCXX_USE_CXX11_ABI=1" yes)
touch "$work/cuda/lib/libtorch_cuda.so"
hide=""
for dir in /usr/local/cuda-* "$(dirname "$(command -v nvcc 2>/dev/null || echo /nonexistent/nvcc)")"; do
  [ -d "$dir" ] && [ ! -L "$dir" ] && hide+="mount -t tmpfs none $dir && "
done
if [ "$(id -u)" = 0 ] && command -v unshare >/dev/null; then
  cat > "$work/hidden.sh" <<SH
#!/bin/sh
unshare -m sh -c '${hide} exec env -u CUDA_HOME -u CUDA_PATH -u CUDAToolkit_ROOT "\$@"' sh "\$@"
SH
  wrap="sh $work/hidden.sh" expect cuda-without-toolkit "$cuda" "" -- \
    "is a CUDA build (lib/libtorch_cuda.so)" "needs the CUDA toolkit" "CUDAToolkit_ROOT"
else
  echo "cuda-without-toolkit: not run (needs root and unshare to hide this machine's toolkit)"
fi
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
