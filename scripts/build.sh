#!/usr/bin/env bash
# Configures and builds kolo into build/ (or $KOLO_BUILD_DIR). Extra arguments go to cmake.
# KOLO_BUILD_TARGETS="t1 t2" builds only those Ninja targets (default: all), e.g.
# main-job (what scripts/main-job.sh runs).
# Where pybind11 and Python's headers are found this includes the Python extension:
# PYTHONPATH=build/python /usr/bin/python3 -c "import kolo.torch".
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${KOLO_BUILD_DIR:-build}
cmake -S . -B "$BUILD" -G Ninja "$@" >/dev/null
# shellcheck disable=SC2086  # a list of target names
ninja -C "$BUILD" ${KOLO_BUILD_TARGETS:-}
