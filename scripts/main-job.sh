#!/usr/bin/env bash
# The README's main-job command: installs what is needed, builds, and trains
# Fashion-MNIST data-parallel on 2 ranks (extra arguments go to the trainer).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh main-job
# Only what the job runs (kolorun and the trainer), not the tests (their
# packages are not installed): scripts/test.sh builds all.
# The tests' build type (RelWithDebInfo) into the same build/: what it compiles
# is what scripts/test.sh would compile for these targets, so running the tests
# after it (CI does) reuses every object instead of compiling them again.
KOLO_BUILD_TARGETS=main-job scripts/build.sh -DKOLO_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
BUILD=${KOLO_BUILD_DIR:-build}
NP=${NP:-2}
if [ -x "$BUILD/examples/fashion_mnist/fashion_mnist" ]; then
  exec "$BUILD/tools/kolorun/kolorun" -np "$NP" "$BUILD/examples/fashion_mnist/fashion_mnist" "$@"
fi
# Without LibTorch: a 2-rank allreduce run that checks its results.
exec "$BUILD/tools/kolorun/kolorun" -np "$NP" "$BUILD/tools/kolo-bench/kolo-bench" -c allreduce -b 8 -e 64M -f 8 "$@"
