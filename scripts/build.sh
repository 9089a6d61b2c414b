#!/usr/bin/env bash
# Configures and builds kolo into build/ (or $KOLO_BUILD_DIR). Extra arguments go to cmake.
# Where pybind11 and Python's headers are found this includes the Python extension:
# PYTHONPATH=build/python /usr/bin/python3 -c "import kolo.torch".
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${KOLO_BUILD_DIR:-build}
cmake -S . -B "$BUILD" -G Ninja "$@" >/dev/null
ninja -C "$BUILD"
