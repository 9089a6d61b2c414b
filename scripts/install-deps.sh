#!/usr/bin/env bash
# Installs the Debian 12 packages kolo needs: every one to build, test and
# benchmark (all, the default), only those the main job needs (main-job), or
# those the documentation site needs (docs).
# Idempotent: does nothing when all are present. Runs apt-get as root (sudo if needed).
set -euo pipefail

# What the main job needs (scripts/main-job.sh): the build, the core's
# libraries, LibTorch and the data set.
MAIN_JOB=(
  cmake ninja-build g++ pkg-config ccache git procps  # build
  libhwy-dev                                          # SIMD reduction kernels
  libcli11-dev libfmt-dev                             # command lines, formatting
  libsodium-dev                                       # job secret authentication
  zlib1g-dev                                          # reading the gzipped data set
  libtorch-dev libopenblas0-pthread                   # kolo_torch (LibTorch 1.13, CPU), fast BLAS
  dataset-fashion-mnist                               # the main job's data
)
# What the tests, fuzzers, anchors and benchmarks need besides (scripts/test.sh).
TESTS=(
  libgtest-dev libbenchmark-dev                       # tests, micro-benchmarks
  clang libclang-rt-14-dev                            # libFuzzer targets
  openmpi-bin libopenmpi-dev python3-torch            # anchors and the mpirun test
  pybind11-dev python3-dev python3-numpy              # the Python extension kolo._C
  python3-pytest python3-venv python3-pip             # Python tests, pip install into a venv
  python3-matplotlib                                  # kolo-trace render, bench/charts.py
  python3-setuptools python3-wheel                    # pip install --no-build-isolation .
  debootstrap                                         # a bare Debian root for the wheel test
  iproute2 util-linux iputils-ping openssh-server openssh-client iperf3 nftables  # emulated hosts
  munge slurmctld slurmd slurm-client                 # Slurm tests (two emulated nodes)
)
# What the documentation site needs (scripts/docs.sh): Sphinx with MyST Markdown
# and the furo theme, Doxygen and Breathe for the C++ header, and what imports kolo
# for autodoc and the migration tables (docs/tools/screenshots.sh installs Chromium
# itself).
DOCS=(
  python3-sphinx python3-myst-parser furo             # the site: Markdown pages, theme
  doxygen python3-breathe                             # the C++ API reference
  pybind11-dev python3-dev python3-numpy python3-torch  # kolo._C and kolo.torch for autodoc
  python3-venv python3-pip                            # PyPI's torch 2.x and TensorFlow, whose
)                                                     # kolo modules the migration tables introspect
case ${1:-all} in
  all) PACKAGES=("${MAIN_JOB[@]}" "${TESTS[@]}" "${DOCS[@]}") ;;
  main-job) PACKAGES=("${MAIN_JOB[@]}") ;;
  docs) PACKAGES=("${MAIN_JOB[@]}" "${DOCS[@]}") ;;
  *) echo "usage: scripts/install-deps.sh [all | main-job | docs]" >&2; exit 2 ;;
esac

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
