#!/usr/bin/env bash
# Installs PyPI's torch (default: the version in KOLO_TORCH2_VERSION below) into
# a virtual environment of Debian's Python, once per machine, and prints the
# environment's python on stdout. pip's cache serves later installs.
#   scripts/install-torch.sh            -> /root/.cache/kolo/venvs/torch-2.15.0/bin/python
#   scripts/install-torch.sh 2.11.0     another version beside it
# The environment does not see Debian's dist-packages (no torch 1.13 in it):
# it is what a user who runs `pip install torch` has. The Linux wheels are CUDA
# builds (several GB with their nvidia-* packages) that run on CPU. The
# trainers kolo drops into (PyTorch Lightning, Ray Train) go in beside torch:
# tests/trainers runs them.
set -euo pipefail
VERSION=${1:-${KOLO_TORCH2_VERSION:-2.15.0}}
ROOT=${KOLO_VENVS:-${XDG_CACHE_HOME:-$HOME/.cache}/kolo/venvs}
VENV=$ROOT/torch-$VERSION
TRAINERS=("pytorch-lightning==2.6.6" "ray[train,data]==2.60.0")
# Holds the trainers' versions: a changed list is installed into the environment.
TRAINERS_DONE=$VENV/.kolo-trainers

source "$(dirname "$0")/pypi-venv.sh"
pypi_venv install-torch "$VENV" \
  "import torch; assert torch.__version__.split('+')[0] == '$VERSION', torch.__version__" \
  "torch==$VERSION" numpy pytest
if [ "$(cat "$TRAINERS_DONE" 2>/dev/null)" != "${TRAINERS[*]}" ]; then
  echo "install-torch: ${TRAINERS[*]} into $VENV" >&2
  "$VENV/bin/pip" install -q --disable-pip-version-check "${TRAINERS[@]}" >&2
  echo "${TRAINERS[*]}" > "$TRAINERS_DONE"
fi
echo "$VENV/bin/python"
