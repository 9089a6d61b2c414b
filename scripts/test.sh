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
# PyPI's torch 2.x (and the trainers) and, for kolo.tensorflow's tests
# (tensorflow.*), TensorFlow 2.x with Keras 3 go into their environments while
# kolo builds (on a fresh machine their downloads and unpacking wait mostly on
# the network and the disk, the build on the CPUs); they only register tests,
# so CMake is run again with them once both are there, which compiles nothing.
venvs=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$venvs"' EXIT
scripts/install-torch.sh > "$venvs/torch" & torch=$!
scripts/install-tensorflow.sh > "$venvs/tf" & tf=$!
scripts/build.sh -DKOLO_BUILD_TESTS=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKOLO_TORCH2_PYTHON= -DKOLO_TF_PYTHON=
wait $torch || { echo "test.sh: scripts/install-torch.sh failed" >&2; exit 1; }
wait $tf || { echo "test.sh: scripts/install-tensorflow.sh failed" >&2; exit 1; }
scripts/build.sh -DKOLO_BUILD_TESTS=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKOLO_TORCH2_PYTHON="$(cat "$venvs/torch")" \
  -DKOLO_TF_PYTHON="$(cat "$venvs/tf")"
BUILD=${KOLO_BUILD_DIR:-build}
cd "$BUILD"
# Three tests at a time on CI's 2 cores (KOLO_TEST_JOBS): many spend most of
# their time waiting (failure detection deadlines, emulated hosts' links, ssh
# and Slurm daemons, Python start-up); with two, a quarter of the cores' time
# went idle. No test asserts on speed; the three that check all of /dev/shm
# get one of their own (tests/private_shm.sh), or run alone where they cannot.
ctest --output-on-failure --timeout 1500 -j "${KOLO_TEST_JOBS:-3}" "$@"
