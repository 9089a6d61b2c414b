#!/usr/bin/env bash
# The README's test command: installs what is needed, builds, runs every test.
#   scripts/test.sh            all tests
#   scripts/test.sh -L kernels only tests with that ctest label (any ctest arguments)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
BUILD=${KOLO_BUILD_DIR:-build}
cd "$BUILD"
# Multi-rank tests oversubscribe the cores already: run tests one at a time.
ctest --output-on-failure --timeout 1500 "$@"
