#!/usr/bin/env bash
# Rehearses tests/gpu/run-on-device.sh where the GPU machine's build conditions
# hold but for the GPU: a bare Debian 12 root (tests/common/bare_root.sh) with a
# compiler and Python's headers and none of Debian's -dev packages kolo uses,
# pip's cmake, ninja and pybind11 (as that machine has them), this machine's
# CUDA toolkit and PyPI's torch (scripts/install-torch.sh: a CUDA build) mounted
# read-only, and the working tree as the device tool sends it with the packed .debs
# (bench/device/pack.sh DIR). There every GPU step reports skipped; what runs is
# the build from the carried .debs and the steps that need no GPU; then, on the
# CPU, what the GPU steps' programs load: kolo._C with the Horovod API on 2
# ranks, check_collectives on 2 ranks, and the kill test's jobs.
#   bench/device/rehearse.sh [DIR]      DIR: the packed .debs (default .device)
# Needs root, debootstrap and network (Debian's mirror, PyPI). ~6 min on an idle
# 2-core machine. Found before any GPU time was spent: a carried pkg-config that
# could not load its own library (2026-11-29).
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
DEBS=$(realpath "${1:-$SRC/.device}")
[ "$(id -u)" -eq 0 ] || { echo "rehearse.sh: needs root (chroot and mounts)" >&2; exit 1; }
ls "$DEBS"/*.deb > /dev/null || { echo "rehearse.sh: no .debs in $DEBS (bench/device/pack.sh $DEBS)" >&2; exit 1; }
PY=$("$SRC/scripts/install-torch.sh")
VENV=$("$PY" -c 'import sys; print(sys.prefix)')
NVCC=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null) ||
  { echo "rehearse.sh: no nvcc here: the GPU parts would not be built" >&2; exit 1; }
CUDA=$(dirname "$(dirname "$(realpath "$NVCC")")")
source "$SRC/tests/common/bare_root.sh"
bare_root
bare_root_mounts
mount_in "$R/$CUDA" --bind -o ro "$CUDA"
mount_in "$R/$VENV" --bind -o ro "$VENV"
mkdir -p "$R/root/kolo"
# What the device tool sends: tracked files and the untracked ones git does not ignore.
git -C "$SRC" ls-files -z -co --exclude-standard | tar -C "$SRC" --null -T - --ignore-failed-read -c |
  tar -x -C "$R/root/kolo"
cp -r "$DEBS" "$R/root/kolo/.device"

cat > "$R/root/run.sh" <<'SCRIPT'
set -euo pipefail
update-ca-certificates >/dev/null 2>&1
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends g++ python3 python3-dev >/dev/null
found=$(dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' | awk '$1 == "ii" {print $2}' |
        grep -E '^(libhwy.*|libfmt.*|libsodium.*|libgtest.*|libcli11.*|pkgconf.*|pkg-config|cmake|ninja-build|pybind11-dev)$' || true)
[ -z "$found" ] || { echo "FAIL: installed: $found"; exit 1; }
"$PY" -m pip install -q --disable-pip-version-check --target /opt/tools cmake ninja pybind11
export PATH=/opt/tools/bin:$CUDA/bin:$PATH PYTHONPATH=/opt/tools
cd /root/kolo
OUT=/root/out STEPS=all PY=$PY tests/gpu/run-on-device.sh
B=build-gpu
export PYTHONPATH=$PWD/$B/python
echo "=== on the CPU: kolo._C, the Horovod API on 2 ranks"
KOLO_TEST_DEVICE=cpu $B/tools/kolorun/kolorun -np 2 --timeout 300 "$PY" tests/python/workers/api_worker.py
echo "=== on the CPU: check_collectives on 2 ranks"
$B/tools/kolorun/kolorun -np 2 --timeout 300 $B/tests/collectives/check_collectives
echo "=== on the CPU: the kill test's jobs (tests/gpu/kill_test.sh)"
DEVICE=cpu tests/gpu/kill_test.sh $B/tools/kolorun/kolorun $B/tests/collectives/check_collectives "$PY"
SCRIPT
# A clean environment: nothing of this machine's (PYTHONPATH, PIP_FIND_LINKS) leaks in.
chroot "$R" /usr/bin/env -i HOME=/root LANG=C.UTF-8 PATH=/usr/sbin:/usr/bin:/sbin:/bin PY="$PY" CUDA="$CUDA" \
  PIP_CERT=/etc/ssl/certs/ca-certificates.crt /bin/bash /root/run.sh
echo "PASS: the device script builds and runs in a root without Debian's -dev packages"
