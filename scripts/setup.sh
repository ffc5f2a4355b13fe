#!/usr/bin/env bash
# Installs what taehv-run needs to build, test and benchmark, on Debian 12 or 13:
#   1. Debian packages (build tools, Boost, yaml-cpp, spdlog, FFmpeg, SLURM, sshd, ...);
#   2. .venv/: a project-local Python environment with scripts/requirements.txt (torch 2.13.0, the default
#      build's libtorch);
#   3. with --cuda, also .venv-cuda/ with scripts/requirements-cuda.txt (torch 2.14.1 CUDA 13 + NCCL 2.30).
# Idempotent: when everything is present it only asks dpkg and compares two stamp files (under a second).
# Needs root (or sudo) only when a Debian package is missing. Says what it could not install and exits 1.
set -euo pipefail
cd "$(dirname "$0")/.."
with_cuda=0
for arg in "$@"; do
  case "$arg" in
    --cuda) with_cuda=1 ;;
    *) echo "setup: unknown option '$arg' (known: --cuda)" >&2; exit 2 ;;
  esac
done

sudo=""
[ "$(id -u)" -eq 0 ] || sudo=sudo
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
# clang + libFuzzer + the sanitizer runtimes (the fuzz targets link -fsanitize=fuzzer,address,undefined, whose
# libclang_rt.* archives are in libclang-rt-N-dev): one LLVM version for all three. A set already installed is kept;
# otherwise the newest set this Debian release packages (bookworm: 14, trixie: 19).
llvm=""
for v in 19 18 17 16 15 14; do
  if installed "clang-$v" && installed "libfuzzer-$v-dev" && installed "libclang-rt-$v-dev"; then llvm=$v; break; fi
done
apt_updated=0
apt_update() {  # once per run: both the LLVM choice and the install below may need fresh package lists
  [ "$apt_updated" -eq 1 ] || $sudo apt-get update -q >/dev/null
  apt_updated=1
}
if [ -z "$llvm" ]; then
  apt_update
  for v in 19 18 17 16 15 14; do
    if apt-cache show "clang-$v" "libfuzzer-$v-dev" "libclang-rt-$v-dev" >/dev/null 2>&1; then llvm=$v; break; fi
  done
fi
if [ -z "$llvm" ]; then
  echo "setup: Debian $(cat /etc/debian_version 2>/dev/null) packages no clang-N with libfuzzer-N-dev and libclang-rt-N-dev (N = 14..19)" >&2
  exit 1
fi
packages=(
  # build
  cmake ninja-build g++ pkg-config ccache python3-venv
  libboost-dev libboost-program-options-dev libboost-filesystem-dev
  libyaml-cpp-dev libspdlog-dev libfmt-dev nlohmann-json3-dev
  libssl-dev  # the node group: HMAC-SHA256 and random nonces (libcrypto), TLS to etcd (libssl)
  libgtest-dev libgmock-dev googletest
  # trainer: video and image decoding; Gloo's headers, which c10d's ProcessGroupGloo.hpp includes and the torch
  # wheel does not ship (libtorch itself comes from .venv)
  libgloo-dev libavformat-dev libavcodec-dev libswscale-dev libavutil-dev libpng-dev libturbojpeg0-dev
  # tests and benchmarks: a real SLURM, real sshd hosts, fuzzing, test videos
  munge slurmctld slurmd slurm-client openssh-server openssh-client iproute2 procps
  ffmpeg "clang-$llvm" "libfuzzer-$llvm-dev" "libclang-rt-$llvm-dev"
  # the etcd node group's tests: a real etcd (3.4 on Debian 12, 3.5 on Debian 13; both serve the v3 JSON gateway)
  etcd-server etcd-client openssl  # openssl: the TLS tests' CA and certificates, made at test time
  # taehv-run's hang diagnosis: every thread's stack of a hung native worker (eu-stack; gdb when it is missing)
  elfutils gdb
)
missing=()
for p in "${packages[@]}"; do
  installed "$p" || missing+=("$p")
done
# Node.js for the offline Kubernetes schema check: any node + npm will do. Some images carry NodeSource's
# nodejs, which bundles npm and conflicts with Debian's npm package, so ask for Debian's only when missing.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  missing+=(nodejs npm)
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  apt_update
  unavailable=()
  for p in "${missing[@]}"; do
    apt-cache show "$p" >/dev/null 2>&1 || unavailable+=("$p")
  done
  if [ ${#unavailable[@]} -gt 0 ]; then
    echo "setup: Debian $(cat /etc/debian_version) has no package named: ${unavailable[*]}." \
         "Install an equivalent by hand or report it; nothing was installed." >&2
    exit 1
  fi
  if ! DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"; then
    echo "setup: apt-get could not install: ${missing[*]} (see its message above)" >&2
    exit 1
  fi
fi

# make_venv DIR REQUIREMENTS: a venv with exactly those pins; skipped when its stamp matches the file.
make_venv() {
  local dir=$1 req=$2
  local stamp="$dir/.taehv-requirements"
  if [ -x "$dir/bin/python" ] && cmp -s "$req" "$stamp"; then
    return 0
  fi
  echo "setup: making $dir from $req (pip takes the torch wheels from this machine's disk where they lie)" >&2
  # The torch wheels on this machine's disk are for CPython 3.11: prefer it (another Python downloads torch).
  local python
  python=$(command -v python3.11 || command -v python3)
  [ -x "$dir/bin/python" ] || "$python" -m venv "$dir"
  # pip's notes on this machine's extra local indexes ("Location ... is ignored") are noise here.
  if ! "$dir/bin/pip" install -q --disable-pip-version-check -r "$req" 2> >(grep -v 'is ignored: it is neither' >&2); then
    echo "setup: pip could not install $req into $dir (see its message above)" >&2
    exit 1
  fi
  cp "$req" "$stamp"
}
make_venv .venv scripts/requirements.txt
if [ "$with_cuda" -eq 1 ]; then
  make_venv .venv-cuda scripts/requirements-cuda.txt
fi
