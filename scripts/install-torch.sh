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
# Written last: a half-finished environment (a killed pip) is made anew.
DONE=$VENV/.kolo-installed
# Holds the trainers' versions: a changed list is installed into the environment.
TRAINERS_DONE=$VENV/.kolo-trainers

if [ ! -f "$DONE" ]; then
  echo "install-torch: torch $VERSION from PyPI into $VENV (once per machine)" >&2
  rm -rf "$VENV"
  mkdir -p "$ROOT"
  /usr/bin/python3 -m venv "$VENV"
  # pip's progress bars would fill CI's log: quiet, but errors still show.
  "$VENV/bin/pip" install -q --disable-pip-version-check "torch==$VERSION" numpy pytest >&2
  "$VENV/bin/python" -c "import torch, sys; assert torch.__version__.split('+')[0] == sys.argv[1], torch.__version__" "$VERSION"
  touch "$DONE"
fi
if [ "$(cat "$TRAINERS_DONE" 2>/dev/null)" != "${TRAINERS[*]}" ]; then
  echo "install-torch: ${TRAINERS[*]} into $VENV" >&2
  "$VENV/bin/pip" install -q --disable-pip-version-check "${TRAINERS[@]}" >&2
  echo "${TRAINERS[*]}" > "$TRAINERS_DONE"
fi
echo "$VENV/bin/python"
