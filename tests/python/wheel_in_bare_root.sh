#!/usr/bin/env bash
# The manylinux wheel on a machine that never built kolo: a bare Debian 12 root
# (debootstrap minbase) gets python3 and python3-venv from apt and nothing else —
# checked: no compiler, no Highway, fmt or libsodium — then the wheel and PyPI's
# torch into a virtual environment, and runs 2-rank Horovod-API jobs (`import
# kolo.torch as hvd`: every collective against its reference on TCP, and
# DistributedOptimizer steps against a single-process reference on shared
# memory) with the wheel's own kolorun, from outside any source tree.
#   tests/python/wheel_in_bare_root.sh [WHEEL]   default: a wheel scripts/wheel.sh builds now
# Needs root (chroot, mounts; skips with 77 without it), debootstrap and network
# (Debian's mirror, PyPI): the root is tests/common/bare_root.sh's; pip's cache
# is mounted into it.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
[ "$(id -u)" -eq 0 ] || { echo "skipped: needs root (chroot and mounts)"; exit 77; }
TORCH=${KOLO_TORCH2_VERSION:-2.15.0}
PIP_CACHE=${PIP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/pip}
source "$SRC/tests/common/bare_root.sh"
bare_root

if [ $# -ge 1 ]; then
  WHEEL=$(realpath "$1")
else
  WHEEL=$(KOLO_WHEEL_DIR=$WORK/dist "$SRC/scripts/wheel.sh")
fi
echo "== wheel: $(basename "$WHEEL")"

mkdir -p "$R/root/wheel" "$PIP_CACHE"
cp "$WHEEL" "$R/root/wheel/"
cp -r "$SRC/tests/python/workers" "$R/root/workers"
bare_root_mounts
mount_in "$R/root/.cache/pip" --bind "$PIP_CACHE"

cat > "$R/root/run.sh" <<'EOF'
set -euo pipefail
update-ca-certificates >/dev/null 2>&1
echo "== apt-get install python3 python3-venv"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3 python3-venv >/dev/null
echo "== nothing to build with, none of kolo's libraries"
found=$(dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' | awk '$1 == "ii" {print $2}' |
        grep -E '^(gcc|gcc-[0-9]+|g\+\+.*|cpp.*|clang.*|libhwy.*|libfmt.*|libsodium.*|python3-dev|pybind11-dev)$' || true)
[ -z "$found" ] || { echo "FAIL: installed: $found"; exit 1; }
for tool in cc gcc g++ c++ clang cmake; do
  ! command -v $tool || { echo "FAIL: $tool is present"; exit 1; }
done
! ldconfig -p | grep -E 'libhwy|libfmt|libsodium' || { echo "FAIL: the libraries are present"; exit 1; }
echo "== pip install the wheel and torch==$TORCH"
python3 -m venv /root/venv
/root/venv/bin/pip install -q /root/wheel/*.whl "torch==$TORCH"
cd /root
/root/venv/bin/python -c "import kolo._C, kolo.torch, torch; print('kolo._C', kolo._C.__file__, 'torch', torch.__version__)"
# kolorun and kolo._C load the wheel's copies of Highway, fmt and libsodium
# (this root has none): every one they name resolves into kolo.libs, and
# between them all three are loaded (kolorun itself needs no Highway: it
# reduces nothing).
bin=$(/root/venv/bin/python -c "import kolo, os; print(os.path.join(os.path.dirname(kolo.__file__), 'bin', 'kolorun'))")
ext=$(/root/venv/bin/python -c "import kolo._C; print(kolo._C.__file__)")
libs=$(ldd "$bin" "$ext")
echo "$libs" | grep -E 'lib(hwy|fmt|sodium)'
! echo "$libs" | grep -E 'lib(hwy|fmt|sodium).*not found' || { echo "FAIL: a library of the wheel is not found"; exit 1; }
! echo "$libs" | grep -E 'lib(hwy|fmt|sodium)' | grep -v "=> /root/venv/.*/kolo.libs/" || { echo "FAIL: not the wheel's copy"; exit 1; }
for lib in hwy fmt sodium; do
  echo "$libs" | grep -q "=> /root/venv/.*/kolo.libs/lib$lib-" || { echo "FAIL: neither kolorun nor kolo._C loads the wheel's lib$lib"; exit 1; }
done
echo "== 2 ranks, TCP: every collective (api_worker.py)"
KOLO_TRANSPORT=tcp /root/venv/bin/kolorun -np 2 --timeout 900 /root/venv/bin/python /root/workers/api_worker.py | tee /root/api.out
echo "== 2 ranks, shared memory: DistributedOptimizer (training_worker.py optimizer)"
KOLO_TRANSPORT=shm /root/venv/bin/kolorun -np 2 --timeout 900 /root/venv/bin/python /root/workers/training_worker.py optimizer | tee /root/training.out
EOF
# A clean environment: nothing of this machine's (PYTHONPATH, PIP_FIND_LINKS) leaks in.
chroot "$R" /usr/bin/env -i HOME=/root LANG=C.UTF-8 PATH=/usr/sbin:/usr/bin:/sbin:/bin TORCH="$TORCH" \
  PIP_CERT=/etc/ssl/certs/ca-certificates.crt PIP_DISABLE_PIP_VERSION_CHECK=1 \
  /bin/bash /root/run.sh

status=0
for r in 0 1; do
  grep -q "^\[$r\] api rank $r of 2 (tcp): OK" "$R/root/api.out" || { echo "FAIL: no OK from api rank $r"; status=1; }
  grep -q "^\[$r\] training rank $r of 2 \[optimizer\]: OK" "$R/root/training.out" ||
    { echo "FAIL: no OK from training rank $r"; status=1; }
done
[ $status -eq 0 ] && echo "PASS: the wheel runs 2-rank jobs in a bare Debian 12 root"
exit $status
