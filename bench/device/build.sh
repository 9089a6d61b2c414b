#!/usr/bin/env bash
# Builds kolorun and the fashion_mnist trainer against the LibTorch of a PyPI
# torch ($PY, default python3) on a machine without Debian's development
# packages, from the .debs that pack.sh put in DIR (unpacked into
# /tmp/kolodeps by unpack_deb.py; the programs find them by their RUNPATH). Configured with the
# tests, the Python extension (for $PY, with its pybind11) and, where nvcc is
# found, kolo's GPU parts, so that more targets can be named.
#   bench/device/build.sh DIR BUILD_DIR [more ninja targets, e.g. kolo-bench check_collectives kolo_python]
set -euo pipefail
dir=$(cd "${1:?usage: build.sh DIR BUILD_DIR}" && pwd) build=${2:?usage: build.sh DIR BUILD_DIR}
PY=${PY:-python3} deps=/tmp/kolodeps
rm -rf $deps && mkdir -p $deps
"$PY" "$(dirname "$0")/unpack_deb.py" $deps "$dir"/*.deb  # dpkg -x, where there may be no dpkg
# Absolute links (libz.so -> /lib/...) would point into this machine's own /lib.
find $deps -type l | while read -r l; do
  t=$(readlink "$l"); case $t in /*) ln -sfn "$deps$t" "$l" ;; esac
done
# pkgconf's library lies beside it, where the loader does not look (the
# machine has no libpkgconf of its own): pkg-config becomes a wrapper saying so,
# for pkgconf alone (the compilers keep the machine's own libraries).
rm -f $deps/usr/bin/pkg-config
printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$deps/usr/lib/x86_64-linux-gnu" "$deps/usr/bin/pkgconf" \
  > $deps/usr/bin/pkg-config
chmod +x $deps/usr/bin/pkg-config
export PATH=$deps/usr/bin:$PATH
export PKG_CONFIG_SYSROOT_DIR=$deps PKG_CONFIG_LIBDIR=$deps/usr/lib/x86_64-linux-gnu/pkgconfig:$deps/usr/share/pkgconfig
torch_cmake=$($PY -c 'import torch; print(torch.utils.cmake_prefix_path)')
# The CUDA wheels' libtorch_cuda.so needs the nvidia-* wheels' libraries at
# link time too (an older system NCCL would not do).
rpath_link=$( (ls -d "$torch_cmake"/../../../nvidia/*/lib 2>/dev/null || true) | sed 's/^/-Wl,-rpath-link,/' | tr '\n' ' ')
# Without it, Caffe2's CMake probes the GPU with a test program.
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
pybind11_dir=$($PY -m pybind11 --cmakedir 2>/dev/null || true)
cmake -S "$(dirname "$0")/../.." -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKOLO_BUILD_TESTS=ON \
  -DPython3_EXECUTABLE="$(command -v "$PY")" ${pybind11_dir:+-Dpybind11_DIR="$pybind11_dir"} \
  -DCMAKE_IGNORE_PREFIX_PATH=/usr -DCMAKE_PREFIX_PATH="$deps/usr;$torch_cmake" \
  -DCMAKE_EXE_LINKER_FLAGS="$rpath_link" -DKOLO_GPU_TEST_TIMEOUT="${KOLO_GPU_TEST_TIMEOUT:-200}"
ninja -C "$build" kolorun fashion_mnist "${@:3}"
