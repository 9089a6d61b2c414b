#!/usr/bin/env bash
# Configures and builds kolo into build/ (or $KOLO_BUILD_DIR). Extra arguments go to cmake.
# KOLO_BUILD_TARGETS="t1 t2" builds only those Ninja targets (default: all), e.g.
# main-job (what scripts/main-job.sh runs).
# Where pybind11 and Python's headers are found this includes the Python extension:
# PYTHONPATH=build/python /usr/bin/python3 -c "import kolo.torch".
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${KOLO_BUILD_DIR:-build}
# Unity builds (CMake joins a target's sources, 8 to a unit): each unit parses
# the headers once, LibTorch's above all (~20 s a file). A fresh machine's
# main-job build: 5 min 28 s -> ~2 min 30 s; every target, tests included: ~7 min.
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_UNITY_BUILD=ON "$@" >/dev/null
# shellcheck disable=SC2086  # a list of target names
ninja -C "$BUILD" ${KOLO_BUILD_TARGETS:-}
