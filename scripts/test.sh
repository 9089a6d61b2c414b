#!/usr/bin/env bash
# The README's test command: installs what is needed, builds, runs every test.
#   scripts/test.sh            all tests
#   scripts/test.sh -L kernels only tests with that ctest label (any ctest arguments)
# The Python tests run twice: under Debian's torch 1.13 (python.*) and under
# PyPI's torch 2.x in a virtual environment (python-torch2.*, made once per
# machine by scripts/install-torch.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
TORCH2_PYTHON=$(scripts/install-torch.sh)
# kolo.tensorflow's tests (tensorflow.*) run under PyPI's TensorFlow 2.x with Keras 3.
TF_PYTHON=$(scripts/install-tensorflow.sh)
scripts/build.sh -DKOLO_BUILD_TESTS=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKOLO_TORCH2_PYTHON="$TORCH2_PYTHON" \
  -DKOLO_TF_PYTHON="$TF_PYTHON"
BUILD=${KOLO_BUILD_DIR:-build}
cd "$BUILD"
# Three tests at a time on CI's 2 cores (KOLO_TEST_JOBS): many spend most of
# their time waiting (failure detection deadlines, emulated hosts' links, ssh
# and Slurm daemons, Python start-up); with two, a quarter of the cores' time
# went idle. No test asserts on speed; the two that check all of /dev/shm run
# alone (RUN_SERIAL).
ctest --output-on-failure --timeout 1500 -j "${KOLO_TEST_JOBS:-3}" "$@"
