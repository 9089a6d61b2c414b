#!/usr/bin/env bash
# Installs PyPI's tensorflow-cpu (default: KOLO_TF_VERSION below; Keras 3 comes
# with it) into a virtual environment of Debian's Python, once per machine, and
# prints the environment's python on stdout. pip's cache serves later installs.
#   scripts/install-tensorflow.sh          -> ~/.cache/kolo/venvs/tensorflow-2.21.0/bin/python
#   scripts/install-tensorflow.sh 2.20.0   another version beside it
# kolo never compiles against TensorFlow: kolo.tensorflow is plain Python on
# TF's public API over the same kolo._C that kolo.torch uses (tests/tensorflow).
set -euo pipefail
VERSION=${1:-${KOLO_TF_VERSION:-2.21.0}}
ROOT=${KOLO_VENVS:-${XDG_CACHE_HOME:-$HOME/.cache}/kolo/venvs}
VENV=$ROOT/tensorflow-$VERSION
# Written last: a half-finished environment (a killed pip) is made anew.
DONE=$VENV/.kolo-installed

if [ ! -f "$DONE" ]; then
  echo "install-tensorflow: tensorflow-cpu $VERSION from PyPI into $VENV (once per machine)" >&2
  rm -rf "$VENV"
  mkdir -p "$ROOT"
  /usr/bin/python3 -m venv "$VENV"
  # pip's progress bars would fill CI's log: quiet, but errors still show.
  "$VENV/bin/pip" install -q --disable-pip-version-check "tensorflow-cpu==$VERSION" pytest >&2
  "$VENV/bin/python" -c "import tensorflow as tf, keras, sys; assert tf.__version__ == sys.argv[1], tf.__version__" "$VERSION"
  touch "$DONE"
fi
echo "$VENV/bin/python"
