#!/usr/bin/env bash
# Packs what bench/device/build.sh needs on a machine that has LibTorch (a
# PyPI torch) and a compiler but none of Debian's development packages and no
# network (the lent GPU machine: Ubuntu, 16 cores): Debian 12's .debs of
# kolo's C++ dependencies (GoogleTest for the test programs), the
# Fashion-MNIST files, and for Horovod's test_torch.py its two files (from
# KOLO_HOROVOD_SOURCE, a checkout or bare git directory: Horovod's code is
# carried to be measured, never committed) and the one package it imports
# that the machine lacks (mock, a wheel). Run here, then carry DIR
# (tests/gpu/run-on-device.sh says how).
#   bench/device/pack.sh DIR      (DIR: a folder the repository ignores)
set -euo pipefail
dir=${1:?usage: pack.sh DIR}
mkdir -p "$dir"
cd "$dir"
apt-get download libfmt-dev libfmt9 libhwy-dev libhwy1 libsodium-dev libsodium23 libcli11-dev \
  zlib1g-dev zlib1g pkgconf pkgconf-bin libpkgconf3 libgtest-dev
cp -r /usr/share/datasets/fashion-mnist fmnist
hvd=${KOLO_HOROVOD_SOURCE:-/work/.mirror/horovod+horovod/repo}
for f in test/parallel/test_torch.py test/utils/common.py; do
  mkdir -p "horovod/$(dirname $f)"
  if [ -e "$hvd/$f" ]; then cp "$hvd/$f" "horovod/$f"; else git --git-dir "$hvd" show "HEAD:$f" > "horovod/$f"; fi
done
mkdir -p wheels
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 -d wheels mock==5.2.0
