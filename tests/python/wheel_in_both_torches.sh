#!/usr/bin/env bash
# One wheel for every torch: installs kolo's manylinux wheel (scripts/wheel.sh,
# for Debian's Python; ctest's install.wheel builds it once for this test and
# install.wheel_in_bare_root) into two fresh virtual environments — one that
# sees Debian's torch 1.13, one that sees PyPI's torch 2.x (the environment
# TORCH2_PYTHON belongs to, through a .pth file) — and runs Python test jobs
# in each through the
# installed package and its `kolorun` console script (no PYTHONPATH, no
# build tree). Checks that both environments load the very same _C*.so.
#   tests/python/wheel_in_both_torches.sh TORCH2_PYTHON [WHEEL]
#   default WHEEL: one scripts/wheel.sh builds now
set -euo pipefail
TORCH2_PYTHON=$1
SRC=$(cd "$(dirname "$0")/../.." && pwd)
WORK=$(mktemp -d /tmp/kolo-wheel.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

if [ $# -ge 2 ]; then
  WHEEL=$(realpath "$2")
else
  WHEEL=$(KOLO_WHEEL_DIR=$WORK/dist "$SRC/scripts/wheel.sh")
fi
echo "wheel: $(basename "$WHEEL")"
WHEEL_SO_SHA=$(/usr/bin/python3 - "$WHEEL" <<'PY'
import hashlib, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
so = [n for n in z.namelist() if n.startswith("kolo/_C") and n.endswith(".so")]
assert len(so) == 1, so
print(hashlib.sha256(z.read(so[0])).hexdigest())
PY
)

TORCH2_SITE=$("$TORCH2_PYTHON" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
source "$SRC/scripts/pypi-venv.sh"
# The wheel alone (--no-deps --no-index): each environment's torch is the one it sees.
make_venv --system-site-packages "$WORK/debian" --no-deps --no-index "$WHEEL"   # sees Debian's torch
make_venv "$WORK/pypi" --no-deps --no-index "$WHEEL"                            # sees only torch 2.x
echo "$TORCH2_SITE" > "$("$WORK/pypi/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/torch2.pth"

status=0
for env in debian pypi; do
  PY=$WORK/$env/bin/python
  echo "== $env: $("$PY" -c 'import torch; print("torch", torch.__version__)')"
  SO_SHA=$(cd /tmp && "$PY" -c "import hashlib, kolo._C as c; print(hashlib.sha256(open(c.__file__, 'rb').read()).hexdigest())")
  if [ "$SO_SHA" != "$WHEEL_SO_SHA" ]; then
    echo "FAIL: $env loads a _C whose sha256 $SO_SHA is not the wheel's $WHEEL_SO_SHA"
    status=1
  fi
  # Jobs through the installed package only: no PYTHONPATH, the environment's
  # own kolorun console script. One job per front and transport (the Horovod
  # API on TCP; the process group's ops, DDP and errors on shared memory, its
  # op names and object collectives on TCP): the suites run whole against the
  # build tree under both torches (python.*, python-torch2.*); what is checked
  # here is the package.
  (cd /tmp && env -u PYTHONPATH KOLORUN="$WORK/$env/bin/kolorun" PYTHONDONTWRITEBYTECODE=1 \
      "$PY" -m pytest -q -p no:cacheprovider \
      "$SRC/tests/python/test_api.py::test_collectives_and_gradients[3-tcp]" \
      "$SRC/tests/python/test_process_group.py::test_ops_ddp_and_errors[2-shm]" \
      "$SRC/tests/python/test_process_group.py::test_both_op_names_and_object_collectives[3-tcp]") || status=1
done
exit $status
