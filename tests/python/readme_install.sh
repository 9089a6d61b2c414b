#!/usr/bin/env bash
# The install page's two pip installs of the checkout (docs/install.md, which the
# README links to), word for word, each on a fresh
# `git clone` (the committed HEAD, as a user gets it) in a fresh virtual
# environment: PyPI's torch with build isolation (setuptools and pybind11 from
# PyPI), and Debian's torch with --no-build-isolation (nothing from PyPI). After
# each, kolo.torch imports from outside the source tree, from the environment's
# site-packages, and the README's example job runs on 2 ranks with the
# environment's kolorun (a smoke run: --limit 2048 images).
#   tests/python/readme_install.sh
# Needs network (PyPI) and Debian's packages (scripts/install-deps.sh: the C++
# build, python3-torch, the data set). torch is held at the version the other
# tests use (PIP_CONSTRAINT; today's newest on PyPI too), from pip's cache when
# it has it.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
WORK=$(mktemp -d /tmp/kolo-readme-install.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
echo "torch==${KOLO_TORCH2_VERSION:-2.15.0}" > "$WORK/constraints.txt"
DATA=/usr/share/datasets/fashion-mnist
[ -d "$DATA" ] || { echo "FAIL: $DATA is missing (dataset-fashion-mnist; scripts/install-deps.sh)"; exit 1; }

# The commands as docs/install.md, python/README.md and pyproject.toml write them:
# the test fails when one of them drifts from what is run here.
PYPI_INSTALL='python3 -m venv .venv && .venv/bin/pip install torch .'
DEBIAN_VENV='/usr/bin/python3 -m venv --system-site-packages .venv'
DEBIAN_INSTALL='.venv/bin/pip install --no-build-isolation .'
PYPI_JOB='.venv/bin/kolorun -np 2 .venv/bin/python examples/python/ddp_fashion_mnist.py'
DEBIAN_JOB='.venv/bin/kolorun -np 2 .venv/bin/python examples/python/horovod_fashion_mnist.py'
status=0
for f in docs/install.md python/README.md pyproject.toml; do
  for cmd in "$PYPI_INSTALL" "$DEBIAN_VENV" "$DEBIAN_INSTALL"; do
    grep -qF -- "$cmd" "$SRC/$f" || { echo "FAIL: $f does not say: $cmd"; status=1; }
  done
done
for cmd in "$PYPI_JOB" "$DEBIAN_JOB"; do
  grep -qF -- "$cmd" "$SRC/docs/install.md" || { echo "FAIL: docs/install.md does not say: $cmd"; status=1; }
done

# install NAME COMMAND...: a fresh clone, the README's commands in it, then checks.
install() {
  local name=$1 dir=$WORK/$1 start=$SECONDS
  shift
  echo "== $name: git clone, then: $*"
  git clone -q "$SRC" "$dir" || return 1
  (cd "$dir" && for cmd in "$@"; do
     CCACHE_BASEDIR=$dir PIP_CONSTRAINT=$WORK/constraints.txt bash -ec "$cmd"
   done) || { echo "FAIL: $name: the install page's install failed"; return 1; }
  echo "== $name: installed in $((SECONDS - start)) s"
  (cd "$WORK" && env -u PYTHONPATH "$dir/.venv/bin/python" - "$dir/.venv" <<'EOF'
import os, sys
import kolo, kolo._C, kolo.torch as hvd, torch
venv = os.path.realpath(sys.argv[1])
for m in (kolo, kolo._C):
    assert os.path.realpath(m.__file__).startswith(venv + "/lib/"), f"{m.__name__} from {m.__file__}"
print(f"kolo.torch from {os.path.dirname(kolo.__file__)}, {hvd.__name__}, torch {torch.__version__}")
EOF
  ) || { echo "FAIL: $name: kolo.torch does not import from the environment"; return 1; }
}

# run_job NAME COMMAND: the README's job line in the clone, a smoke run.
run_job() {
  local out
  out=$(cd "$WORK/$1" && env -u PYTHONPATH bash -c "$2 --limit 2048" 2>&1) ||
    { echo "$out" | tail -30; echo "FAIL: $1: the install page's job failed"; return 1; }
  echo "$out" | grep -E "test (set|accuracy)" | tail -2
  echo "$out" | grep -qE "^\[0\] test (set: average loss|accuracy)" ||
    { echo "$out" | tail -30; echo "FAIL: $1: the job reported no test accuracy"; return 1; }
}

install pypi "$PYPI_INSTALL" && run_job pypi "$PYPI_JOB" || status=1
install debian "$DEBIAN_VENV" "$DEBIAN_INSTALL" && run_job debian "$DEBIAN_JOB" || status=1
[ $status -eq 0 ] && echo "PASS: the install page's installs work on a fresh clone"
exit $status
