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
source "$(dirname "$0")/pypi-venv.sh"
pypi_venv install-tensorflow "$VENV" \
  "import tensorflow as tf, keras; assert tf.__version__ == '$VERSION', tf.__version__" \
  "tensorflow-cpu==$VERSION" pytest
echo "$VENV/bin/python"
