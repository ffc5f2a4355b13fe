#!/usr/bin/env bash
# Makes the offline dependency bundle: a folder with exactly what taehv-run, its plugins, taehv-train and their
# tests need to build beyond torch, a C++ compiler and CMake, taken from this machine's Debian packages
# (scripts/setup.sh installs them). A machine without those packages (a stock PyTorch GPU image: no apt, no -dev
# packages, nothing downloadable) builds with it by one option:
#   cmake -S . -B build -DTAEHV_DEPS=<bundle>        (scripts/gpu-check.sh does this)
#
# usage: scripts/bundle-deps.sh [DIR]     (default: deps-bundle/, ignored by git; replaced if present)
#
# What goes in, in Debian's own /usr layout so the packages' CMake files work from the new place unchanged:
#   headers   Boost (only the files the project's Boost includes reach, found by the preprocessor), yaml-cpp,
#             nlohmann/json, spdlog, fmt, GoogleTest/GoogleMock, OpenSSL, Gloo (c10d's ProcessGroupGloo.hpp includes
#             it; torch wheels do not ship it), libpng, libturbojpeg, zlib (libpng's)
#   libraries the shared libraries with their SONAME links (Boost.Program_options and .Filesystem, yaml-cpp, spdlog,
#             fmt, libcrypto, libpng16, libturbojpeg, zlib) and GoogleTest's static archives
#   cmake     the packages' CMake config files
#   taehv-deps.cmake  what the bundle was made on (CPU, glibc, C++ ABI), checked at configure time
# Not in it: FFmpeg (dozens of codec libraries; without it taehv-train builds without video files, and says so).
# Prints the bundle's size; fails over 40 MiB.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-deps-bundle}"
arch=$(gcc -print-multiarch 2>/dev/null || true)
if [[ -z "$arch" || ! -d "/usr/lib/$arch" ]]; then
  echo "bundle-deps: cannot tell this machine's multiarch folder (gcc -print-multiarch said '$arch'); run it on the" \
       "Debian machine scripts/setup.sh set up" >&2
  exit 1
fi
packages=(libboost-dev libboost-program-options-dev libboost-filesystem-dev libyaml-cpp-dev nlohmann-json3-dev
          libspdlog-dev libfmt-dev libgtest-dev libgmock-dev libssl-dev libgloo-dev libpng-dev libturbojpeg0-dev zlib1g-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "bundle-deps: this machine lacks ${missing[*]}: run scripts/setup.sh first (it installs them)" >&2
  exit 1
fi

rm -rf "$out"
mkdir -p "$out/include" "$out/lib/$arch/cmake" "$out/share/cmake"
inc="$out/include"
libdir="$out/lib/$arch"

# Boost: the headers its includes in this tree reach, no more (all of Boost's are ~150 MiB).
boost_includes=$(git ls-files 'core/*' 'plugins/*' 'trainer/*' 'tests/*' 'bench/*' 'examples/*' |
                 grep -E '\.(cc|h|hpp)$' | xargs grep -hoE '#include <boost/[^>]+>' | sort -u)
printf '%s\n' "$boost_includes" |
  g++ -std=c++17 -M -x c++ - 2>/dev/null | tr ' \\' '\n\n' | grep -E '^/usr/include/boost/' | sort -u |
  while read -r header; do
    mkdir -p "$inc/$(dirname "${header#/usr/include/}")"
    cp "$header" "$inc/${header#/usr/include/}"
  done
[[ -f "$inc/boost/program_options.hpp" ]] || { echo "bundle-deps: the Boost header walk found nothing" >&2; exit 1; }

# Whole header folders of the smaller packages (cp -L: Debian links png.h into libpng16/).
for d in yaml-cpp nlohmann spdlog fmt gtest gmock openssl gloo libpng16; do cp -rL "/usr/include/$d" "$inc/"; done
cp -L /usr/include/png.h /usr/include/pngconf.h /usr/include/pnglibconf.h /usr/include/turbojpeg.h \
   /usr/include/zlib.h /usr/include/zconf.h "$inc/"
# OpenSSL's configuration headers live in Debian's multiarch include folder; the bundle has one include folder.
cp "/usr/include/$arch/openssl/"*.h "$inc/openssl/"

# Libraries: the file, and relative links for its SONAME and the dev name (Debian's links can be absolute).
for name in boost_program_options boost_filesystem yaml-cpp spdlog fmt crypto png16 turbojpeg z; do
  file=$(readlink -f "/usr/lib/$arch/lib$name.so")
  soname=$(objdump -p "$file" | awk '$1 == "SONAME" {print $2}')
  cp "$file" "$libdir/"
  [[ "$soname" == "$(basename "$file")" ]] || ln -s "$(basename "$file")" "$libdir/$soname"
  ln -s "$soname" "$libdir/lib$name.so"
done
ln -s libpng16.so "$libdir/libpng.so"
cp "/usr/lib/$arch/"lib{gtest,gtest_main,gmock,gmock_main}.a "$libdir/"

# CMake config files, relocatable as Debian ships them (each computes its prefix from its own place).
for d in Boost-* BoostDetectToolset-*.cmake boost_headers-* boost_program_options-* boost_filesystem-* \
         boost_system-* yaml-cpp spdlog fmt GTest; do
  cp -r "/usr/lib/$arch/cmake/"$d "$libdir/cmake/"
done
cp -r /usr/share/cmake/nlohmann_json "$out/share/cmake/"

# What the bundle was made on: TaehvDeps.cmake refuses it on another CPU or an older glibc, naming both.
glibc=$(ldd --version | head -n1 | grep -oE '[0-9]+\.[0-9]+$')
cat >"$out/taehv-deps.cmake" <<EOF
# Made by scripts/bundle-deps.sh on $(date -u +%Y-%m-%d), Debian $(cat /etc/debian_version).
set(TAEHV_DEPS_FORMAT 1)
set(TAEHV_DEPS_PROCESSOR "$(uname -m)")
set(TAEHV_DEPS_MULTIARCH "$arch")
set(TAEHV_DEPS_GLIBC "$glibc")
set(TAEHV_DEPS_CXX11_ABI 1)
set(TAEHV_DEPS_PACKAGES "$(dpkg-query -W -f='${Package}=${Version} ' "${packages[@]}")")
EOF

size=$(du -sbL "$out" | cut -f1)
mib=$((size / 1024 / 1024))
echo "bundle-deps: $out: $(find "$out" -type f | wc -l) files, ${mib} MiB (glibc $glibc, $(uname -m))"
if [[ $size -gt $((40 * 1024 * 1024)) ]]; then
  echo "bundle-deps: the bundle is over 40 MiB (${mib} MiB): too large to travel with the tree" >&2
  exit 1
fi
