#!/usr/bin/env bash
# The trainer builds and passes its CPU tests with only the offline bundle (issue 37, deliverable 3): a minimal Debian
# of this machine's release (debootstrap --variant=minbase) that holds g++, make, ninja, CMake, python3 + venv and a
# venv with the torch CPU wheel pinned in scripts/requirements.txt, and NO -dev library package (checked: no Boost,
# yaml-cpp, GoogleTest, OpenSSL, nlohmann, spdlog, fmt, Gloo, libpng, turbojpeg, zlib, FFmpeg headers, no
# pkg-config). Into it go a copy of this working tree (`git ls-files -co --exclude-standard`: uncommitted work
# included) and a bundle that scripts/bundle-deps.sh makes on this machine; inside, with the venv's python3 first on
# PATH and no Torch_DIR, it configures with -DTAEHV_DEPS=<bundle> -DTAEHV_TRAINER_TESTS_ONLY=ON, builds trainer_tests
# and taehv-run, and runs `ctest -LE 'slow|cuda'`. Fails when configure does not say "dependencies from the bundle"
# and "built without video files", when the build fails, or when any test fails. Prints the chroot's size, each
# phase's time and the tests passed/failed.
#
#   bash tests/infra/chroot_build_test.sh          (as root; ctest: `ctest -L chroot`, label chroot;slow)
#
# The chroot is made once and kept in $TAEHV_CHROOT_CACHE (default /var/cache/taehv-chroot), keyed by a stamp of the
# release, the package list, requirements.txt and the local torch wheel; a changed key makes a new one (the old one
# of that release is removed). Making it takes debootstrap + apt (from deb.debian.org, or $TAEHV_DEBIAN_MIRROR) and
# pip (the torch wheel from this machine's local wheel folder, the rest from pip's indexes): 165 s here, 1.7 GB.
# Every run builds from cold in a fresh work folder under /var/tmp, removed afterwards (TAEHV_CHROOT_KEEP=1 keeps it):
# on 2 shared cores (2026-11-26) configure 3 s, build 1,090 s, ctest 314 s (150 tests); 24 minutes in all.
# TAEHV_CHROOT_JOBS (default 2): build and ctest parallelism. ../shared (the tests' reference data) is bind-mounted
# read-only inside and is TAEHV_SHARED_DIR there.
# All mounts live in a private mount namespace (unshare -m) and are also undone by an exit trap, failure included.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
self="$repo/tests/infra/chroot_build_test.sh"
say() { echo "chroot_build: $*" >&2; }
fail() { echo "chroot_build: FAIL: $*" >&2; exit 1; }

[[ $(id -u) -eq 0 ]] || fail "needs root (debootstrap, mount, chroot), and runs as $(id -un): run it as root (CI does)"
for tool in unshare chroot mount git tar flock; do
  command -v "$tool" >/dev/null || fail "needs '$tool' on this machine"
done
if ! command -v debootstrap >/dev/null; then
  say "installing debootstrap on this machine (apt-get)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap >/dev/null ||
    { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap >/dev/null; } ||
    fail "debootstrap is not installed and apt-get could not install it"
fi
# Every mount below is made in a mount namespace of our own: none leaks to the machine, even after a kill -9.
if [[ -z ${TAEHV_CHROOT_UNSHARED:-} ]]; then
  exec env TAEHV_CHROOT_UNSHARED=1 unshare --mount --propagation private bash "$self" "$@"
fi

# --- what the chroot is -------------------------------------------------------------------------------------------
. /etc/os-release
codename=${VERSION_CODENAME:-}
[[ -n $codename ]] || fail "cannot tell this machine's Debian release (/etc/os-release has no VERSION_CODENAME)"
arch=$(dpkg --print-architecture)
mirror=${TAEHV_DEBIAN_MIRROR:-http://deb.debian.org/debian}
jobs=${TAEHV_CHROOT_JOBS:-2}
packages=(g++ make ninja-build cmake python3 python3-venv)
venv=/opt/torch-venv
req="$repo/scripts/requirements.txt"
torch_version=$(sed -nE 's/^torch==([0-9][^ ;#]*).*/\1/p' "$req")
[[ -n $torch_version ]] || fail "scripts/requirements.txt pins no torch==VERSION"
torch_version=${torch_version%%+*}
# pip's local wheel folders on this machine (find-links of its config and environment), bind-mounted read-only into
# the chroot at the same paths while pip runs, with the file:// indexes and the pip configuration.
pip_dirs=()
add_pip_dir() {  # once each
  local d
  [[ -d $1 ]] || return 0
  for d in "${pip_dirs[@]}"; do [[ $d != "$1" ]] || return 0; done
  pip_dirs+=("$1")
}
pip_config=$(pip3 config list 2>/dev/null || true)
for d in ${PIP_FIND_LINKS:-} $(sed -nE "s/^[^=]*find-links='(.*)'$/\1/p" <<<"$pip_config") /opt/wheels; do add_pip_dir "$d"; done
for u in $(sed -nE "s/^[^=]*index-url='(.*)'$/\1/p" <<<"$pip_config"); do
  [[ $u != file://* ]] || add_pip_dir "${u#file://}"
done
local_wheels=$(for d in "${pip_dirs[@]}"; do
                 find "$d" -maxdepth 1 -name "torch-$torch_version+cpu-*.whl" -printf '%f\n'
               done | sort -u)
key=$(printf 'recipe 1\n%s %s %s\n%s\n%s\n%s\n' "$codename" "$arch" "$mirror" "${packages[*]}" "$(cat "$req")" \
      "$local_wheels" | sha256sum | cut -c1-12)
cache=${TAEHV_CHROOT_CACHE:-/var/cache/taehv-chroot}
root="$cache/$codename-$arch-$key"
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock -w 3600 9 || fail "another run holds $cache/.lock for over an hour"

# --- mounts, undone on exit -----------------------------------------------------------------------------------------
mounted=()
work=""
mnt() {  # mnt [mount options...] TARGET: mount, and remember TARGET for the exit trap
  mount "$@"
  mounted=("${!#}" "${mounted[@]}")
}
bind() {  # bind SRC DST [ro]: DST made as a folder or an empty file like SRC
  if [[ -d $1 ]]; then mkdir -p "$2"; else mkdir -p "$(dirname "$2")"; [[ -e $2 ]] || touch "$2"; fi
  mnt --bind "$1" "$2"
  [[ ${3:-} != ro ]] || mount -o remount,bind,ro "$2"
}
unmount_all() {
  local m
  for m in "${mounted[@]}"; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || say "could not unmount $m"; done
  mounted=()
}
cleanup() {
  local rc=$?
  unmount_all
  if [[ -n $work && -d $work ]]; then
    if [[ ${TAEHV_CHROOT_KEEP:-0} == 1 ]]; then say "kept the work folder $work"; else rm -rf --one-file-system "$work"; fi
  fi
  rm -rf --one-file-system "$cache/making-$key"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
system_mounts() {  # system_mounts ROOT: /proc, /sys (read-only), /dev, /dev/pts, a fresh /dev/shm
  mnt --bind "$1" "$1"  # ROOT a mount point: inside, / is then one, which unshare -m (some tests) needs
  mnt -t proc proc "$1/proc"
  bind /sys "$1/sys" ro
  bind /dev "$1/dev"
  bind /dev/pts "$1/dev/pts"
  mnt -t tmpfs -o mode=1777,size=2g tmpfs "$1/dev/shm"
}
in_chroot() {  # in_chroot ROOT [VAR=VALUE...] -- COMMAND...: a clean environment, the venv's python3 first on PATH
  local r=$1; shift
  local vars=()
  while [[ $1 != -- ]]; do vars+=("$1"); shift; done
  shift
  chroot "$r" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb TMPDIR=/tmp \
    PATH="$venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" "${vars[@]}" "$@"
}

# --- the chroot: made once per key ------------------------------------------------------------------------------------
t_debootstrap=0 t_pip=0
if [[ -f $root/.taehv-chroot-stamp ]]; then
  say "reusing the chroot $root (Debian $(cat "$root/etc/debian_version"), made $(stat -c %y "$root/.taehv-chroot-stamp" | cut -d. -f1))"
else
  for old in "$cache/$codename-$arch-"*; do [[ -d $old ]] && { say "removing the outdated chroot $old"; rm -rf --one-file-system "$old"; }; done
  making="$cache/making-$key"
  rm -rf --one-file-system "$making"
  say "debootstrap --variant=minbase $codename ($arch) from $mirror, then apt-get install ${packages[*]}"
  start=$(date +%s)
  debootstrap --variant=minbase --arch="$arch" "$codename" "$making" "$mirror" >"$cache/debootstrap.log" 2>&1 ||
    { tail -n 20 "$cache/debootstrap.log" >&2; fail "debootstrap $codename failed (log: $cache/debootstrap.log)"; }
  cp /etc/resolv.conf "$making/etc/resolv.conf"
  system_mounts "$making"
  in_chroot "$making" DEBIAN_FRONTEND=noninteractive -- apt-get update -q >/dev/null
  in_chroot "$making" DEBIAN_FRONTEND=noninteractive -- \
    apt-get install -y -q --no-install-recommends "${packages[@]}" >"$cache/apt.log" 2>&1 ||
    { tail -n 20 "$cache/apt.log" >&2; fail "apt-get install ${packages[*]} failed in the chroot (log: $cache/apt.log)"; }
  in_chroot "$making" -- apt-get clean
  t_debootstrap=$(( $(date +%s) - start ))

  start=$(date +%s)
  # pip as on this machine: its local wheel folders and file:// indexes, its configuration and CA bundle (which holds
  # this network's TLS proxy's certificate), all read-only at the same paths.
  for d in "${pip_dirs[@]}" /etc/xdg/pip /etc/ssl/certs/ca-certificates.crt; do
    [[ -e $d ]] && bind "$d" "$making$d" ro
  done
  pip_env=()
  for v in $(env | grep -o '^PIP_[A-Z_]*='); do v=${v%=}; pip_env+=("$v=${!v}"); done
  cp "$req" "$making/tmp/requirements.txt"
  echo "torch==$torch_version+cpu" >"$making/tmp/cpu-torch.txt"  # the CPU wheel, never a CUDA build
  py_tag=$(in_chroot "$making" -- python3 -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
  extra=()
  if ! grep -q -- "-$py_tag-$py_tag-" <<<"$local_wheels"; then
    say "no local torch $torch_version+cpu wheel for $py_tag (found: ${local_wheels:-none}): pip takes it from download.pytorch.org/whl/cpu"
    extra=(--extra-index-url https://download.pytorch.org/whl/cpu)
  fi
  in_chroot "$making" -- python3 -m venv "$venv"
  in_chroot "$making" "${pip_env[@]}" -- "$venv/bin/pip" install -q --disable-pip-version-check "${extra[@]}" \
    -c /tmp/cpu-torch.txt -r /tmp/requirements.txt 2> >(grep -v 'is ignored: it is neither' >&2) ||
    fail "pip could not install scripts/requirements.txt (torch $torch_version+cpu) into the chroot's venv"
  rm -f "$making/tmp/requirements.txt" "$making/tmp/cpu-torch.txt"
  rm -rf "$making/root/.cache/pip"
  t_pip=$(( $(date +%s) - start ))
  unmount_all
  printf 'key %s\n%s %s\npackages %s\n%s\n' "$key" "$codename" "$arch" "${packages[*]}" "$local_wheels" \
    >"$making/.taehv-chroot-stamp"
  mv "$making" "$root"
  say "made the chroot in $((t_debootstrap + t_pip)) s (debootstrap + apt ${t_debootstrap} s, pip ${t_pip} s)"
fi
chroot_size=$(du -sxh "$root" | cut -f1)

# --- the chroot holds no -dev library package and no pkg-config ------------------------------------------------------
multiarch=$(chroot "$root" gcc -print-multiarch)
installed=$(chroot "$root" dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' | awk '$1 ~ /^ii/ {print $2}')
bad=$(grep -E '^(libboost|libyaml-cpp|libgtest|libgmock|googletest|nlohmann-json|libspdlog|libfmt|libgloo|libturbojpeg|libjpeg|libpng|libav|libsw|libpostproc|ffmpeg|pkg-config|pkgconf|ccache)' <<<"$installed" || true)
# -dev packages: only the compiler's own (glibc, the kernel's headers, libstdc++, libgcc, libcrypt/nsl/tirpc of libc6-dev).
bad+=" "$(grep -E -- '-dev(:|$)' <<<"$installed" |
       grep -vE '^(libc6-dev|libc-dev-bin|linux-libc-dev|libcrypt-dev|libnsl-dev|libtirpc-dev|libstdc\+\+-[0-9]+-dev|libgcc-[0-9]+-dev)(:|$)' || true)
bad=$(echo $bad)
[[ -z $bad ]] || fail "the chroot holds packages it must not have: $bad"
for h in boost yaml-cpp gtest gmock openssl "$multiarch/openssl" nlohmann spdlog fmt gloo libpng16 png.h turbojpeg.h \
         zlib.h libavformat; do
  [[ ! -e $root/usr/include/$h ]] || fail "the chroot has /usr/include/$h: it must hold no library headers"
done
torch_info=$(chroot "$root" "$venv/bin/python" -c 'import torch; print(torch.__version__, torch.version.cuda)')
[[ $torch_info == "$torch_version+cpu None" ]] || fail "the chroot's torch is '$torch_info', not $torch_version+cpu (CPU)"
say "chroot $root: Debian $(cat "$root/etc/debian_version"), $chroot_size, $(wc -l <<<"$installed") packages" \
    "(no -dev library package, no pkg-config), $(chroot "$root" g++ --version | head -n1), $(chroot "$root" cmake --version | head -n1)," \
    "torch $torch_info from $venv"

# --- this tree and a bundle made here, into a fresh work folder -------------------------------------------------------
[[ -d $repo/../shared ]] || fail "../shared (the tests' reference data) is not beside the checkout ($repo/../shared)"
mkdir -p /var/tmp
work=$(mktemp -d /var/tmp/taehv-chroot-build.XXXXXX)
mkdir -p "$work/src" "$work/shared" "$work/build" "$work/tmp"
chmod 1777 "$work/tmp"
start=$(date +%s)
bash "$repo/scripts/bundle-deps.sh" "$work/deps-bundle" >&2 || fail "scripts/bundle-deps.sh failed on this machine"
(cd "$repo" && git ls-files -z -co --exclude-standard |
   while IFS= read -r -d '' f; do [[ -e $f || -L $f ]] && printf '%s\0' "$f"; done |
   tar -c --null -T - -f -) | tar -x -C "$work/src"
say "bundle and tree copied in $(( $(date +%s) - start )) s ($(du -sh "$work/src" | cut -f1) of sources)"

system_mounts "$root"
bind "$work" "$root/work"
bind "$work/tmp" "$root/tmp"
bind "$(cd "$repo/../shared" && pwd)" "$root/work/shared" ro

start=$(date +%s)
in_chroot "$root" -- cmake -S /work/src -B /work/build -G Ninja -DTAEHV_DEPS=/work/deps-bundle \
  -DTAEHV_TRAINER_TESTS_ONLY=ON -DTAEHV_SHARED_DIR=/work/shared 2>&1 | tee "$work/configure.log" >&2 ||
  fail "configure failed in the chroot (above)"
t_configure=$(( $(date +%s) - start ))
grep -q 'dependencies from the bundle' "$work/configure.log" ||
  fail "configure did not say 'dependencies from the bundle': the bundle was not used"
grep -q 'built without video files' "$work/configure.log" ||
  fail "configure did not say 'built without video files' (FFmpeg is in neither the chroot nor the bundle)"
grep -q 'libtorch of the python3 on PATH' "$work/configure.log" ||
  fail "configure did not take torch from the python3 on PATH ($venv/bin/python3)"

start=$(date +%s)
in_chroot "$root" -- cmake --build /work/build -j "$jobs" --target trainer_tests taehv-run >&2 ||
  fail "the build failed in the chroot (above)"
t_build=$(( $(date +%s) - start ))

start=$(date +%s)
set +e
in_chroot "$root" -- bash -c "cd /work/build && ctest --output-on-failure --timeout 900 -j $jobs -LE 'slow|cuda'" 2>&1 |
  tee "$work/ctest.log" >&2
ctest_rc=${PIPESTATUS[0]}
set -e
t_ctest=$(( $(date +%s) - start ))
summary=$(grep -E 'tests passed, [0-9]+ tests? failed out of [0-9]+' "$work/ctest.log" | tail -n1)
total=$(sed -nE 's/.* out of ([0-9]+).*/\1/p' <<<"$summary")
failed=$(sed -nE 's/.*passed, ([0-9]+) tests? failed.*/\1/p' <<<"$summary")
skipped=$(grep -cE '^ *[0-9]+/[0-9]+ Test +#[0-9]+: .*\*\*\*Skipped' "$work/ctest.log" || true)

echo "chroot_build: figures: chroot $chroot_size (Debian $(cat "$root/etc/debian_version"), $codename);" \
     "debootstrap+apt ${t_debootstrap} s, pip ${t_pip} s (0: chroot reused); configure ${t_configure} s," \
     "build ${t_build} s (-j$jobs), ctest ${t_ctest} s;" \
     "tests: $(( ${total:-0} - ${failed:-0} - skipped )) passed, ${failed:-?} failed, $skipped skipped (builds without FFmpeg skip" \
     "the video-file tests), of ${total:-?}"
[[ -n $total && $total -gt 0 ]] || fail "ctest ran no test (rc $ctest_rc)"
[[ $ctest_rc -eq 0 && ${failed:-1} -eq 0 ]] || fail "${failed:-some} of $total tests failed in the chroot (ctest rc $ctest_rc)"
echo "chroot_build: PASS: the trainer built and passed its $total tests ($skipped skipped) with only the bundle, python3 + torch $torch_version CPU, CMake and g++"
