#!/usr/bin/env bash
# Packs what bench/device/build.sh needs on a machine that has LibTorch (a
# PyPI torch) and a compiler but none of Debian's development packages and no
# network (the lent GPU machine: Ubuntu, 16 cores): Debian 12's .debs of
# kolo's C++ dependencies (GoogleTest for the test programs), and the
# Fashion-MNIST files. Run here, then carry DIR (tests/gpu/run-on-device.sh
# says how).
#   bench/device/pack.sh DIR      (DIR: a folder the repository ignores)
set -euo pipefail
dir=${1:?usage: pack.sh DIR}
mkdir -p "$dir"
cd "$dir"
apt-get download libfmt-dev libfmt9 libhwy-dev libhwy1 libsodium-dev libsodium23 libcli11-dev \
  zlib1g-dev zlib1g pkgconf pkgconf-bin libpkgconf3 libgtest-dev
cp -r /usr/share/datasets/fashion-mnist fmnist
