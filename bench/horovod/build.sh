#!/usr/bin/env bash
# Builds Horovod (for measurement beside kolo only: never vendored, never a dependency of
# kolo) from its PyPI source package into its own virtual environment that sees Debian's
# torch 1.13, with the Gloo and MPI controllers on CPU against Debian's Open MPI. Once per
# machine: a marker file is written last, so a killed or failed build is redone next time.
#
#   bench/horovod/build.sh            build if needed; prints the venv's path on the last line
#   bench/horovod/build.sh --force    rebuild even if the marker is there
#   bench/horovod/build.sh --check    exit 0 if a finished build is there, 1 if not (no build)
#
# Environment (all optional):
#   HOROVOD_VERSION  PyPI version (default 0.28.1)
#   HOROVOD_SRC      build from this source instead of PyPI: a .tar.gz sdist, a source
#                    directory, or git:REV to `git archive` REV of HOROVOD_GIT (a bare clone
#                    of github:horovod/horovod; its third_party submodules are not in a bare
#                    archive, so REV must be one whose needed submodules are supplied by the
#                    0.28.1 sdist: see the note at "git:" below)
#   HOROVOD_GIT      default /work/.mirror/horovod+horovod/repo
#   HOROVOD_VENV     default ~/.cache/kolo/venvs/horovod-$HOROVOD_VERSION (or -REV for git:)
#   MAKEFLAGS        default -j2 (the 2-core machine); Horovod's setup.py uses -j8 without it
#   LOG              build log (default $HOROVOD_VENV.build.log)
#
# Debian packages it needs and installs with apt-get when missing: g++ make cmake
# python3-venv (the venv's pip) python3-dev python3-torch libopenmpi-dev openmpi-bin.
# PyPI packages it installs into the venv: wheel, and Horovod's own requirements
# (cloudpickle psutil pyyaml packaging cffi). Horovod 0.28.1 built here on 2026-11-26 with
# torch 1.13.1 (Debian), GCC 12.2, Python 3.11.2, Open MPI 4.1.4 as it is (its C++14 is
# enough for torch 1.13; the snapshot's C++17 fix is for torch >= 2.1), in 1110 s on
# 2 cores loaded by other work. The git: path above was checked up to the source tree
# (third_party filled from the sdist; unchanged between v0.28.1 and the snapshot's HEAD),
# not built, as 0.28.1 needed no substitute.
set -uo pipefail

FORCE=0 CHECK=0
for a in "$@"; do
  case $a in
    --force) FORCE=1 ;;
    --check) CHECK=1 ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "build.sh: unknown option $a (see --help)" >&2; exit 2 ;;
  esac
done

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HOROVOD_VERSION=${HOROVOD_VERSION:-0.28.1}
HOROVOD_GIT=${HOROVOD_GIT:-/work/.mirror/horovod+horovod/repo}
HOROVOD_SRC=${HOROVOD_SRC:-}
tag=$HOROVOD_VERSION
case $HOROVOD_SRC in git:*) tag=git-${HOROVOD_SRC#git:}; tag=${tag:0:16} ;; esac
VENV=${HOROVOD_VENV:-$HOME/.cache/kolo/venvs/horovod-$tag}
MARKER=$VENV/.kolo-horovod-built
LOG=${LOG:-$VENV.build.log}
export MAKEFLAGS=${MAKEFLAGS:--j2}

if [ "$CHECK" = 1 ]; then
  [ -f "$MARKER" ] && exit 0 || exit 1
fi
if [ "$FORCE" = 0 ] && [ -f "$MARKER" ]; then
  echo "build.sh: Horovod already built ($(cat "$MARKER" | head -1)); --force rebuilds" >&2
  echo "$VENV"
  exit 0
fi

fail() { echo "build.sh: FAILED: $*" >&2; exit 1; }

# --- Debian packages -----------------------------------------------------------------
need=()
for p in g++ make cmake python3-venv python3-dev python3-torch libopenmpi-dev openmpi-bin; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "build.sh: installing Debian packages: ${need[*]}" >&2
  [ "$(id -u)" = 0 ] || fail "need root to apt-get install ${need[*]}"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"; } >&2 \
    || fail "apt-get install ${need[*]}"
fi
command -v mpicxx >/dev/null || fail "mpicxx not on PATH after installing libopenmpi-dev"
/usr/bin/python3 -c 'import torch' 2>/dev/null || fail "Debian's /usr/bin/python3 cannot import torch"

# --- the venv --------------------------------------------------------------------------
rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")"
: > "$LOG" || fail "cannot write $LOG"
echo "build.sh: building Horovod ${HOROVOD_SRC:-$HOROVOD_VERSION from PyPI} into $VENV" >&2
echo "build.sh: log $LOG (MAKEFLAGS=$MAKEFLAGS); this takes long on 2 cores" >&2
source "$ROOT/scripts/pypi-venv.sh"
make_venv --system-site-packages "$VENV" wheel cloudpickle psutil pyyaml packaging cffi >>"$LOG" 2>&1 \
  || fail "python3 -m venv or pip install of Horovod's requirements (see $LOG)"
PY=$VENV/bin/python

# --- the source ----------------------------------------------------------------------
SRCDIR=$VENV.src
rm -rf "$SRCDIR"; mkdir -p "$SRCDIR"
case $HOROVOD_SRC in
  "")
    "$PY" -m pip download -q --no-deps --no-binary :all: "horovod==$HOROVOD_VERSION" -d "$SRCDIR" >>"$LOG" 2>&1 \
      || fail "pip download horovod==$HOROVOD_VERSION (see $LOG)"
    target=$(ls "$SRCDIR"/horovod-*.tar.gz) ;;
  git:*)
    # A bare snapshot holds no submodule files (third_party/{gloo,flatbuffers,eigen,...});
    # they are taken from the 0.28.1 sdist, which ships them.
    rev=${HOROVOD_SRC#git:}
    git --git-dir="$HOROVOD_GIT" archive --prefix=horovod/ "$rev" | tar -x -C "$SRCDIR" \
      || fail "git archive $rev from $HOROVOD_GIT"
    "$PY" -m pip download -q --no-deps --no-binary :all: "horovod==0.28.1" -d "$SRCDIR" >>"$LOG" 2>&1 \
      || fail "pip download horovod==0.28.1 (for third_party)"
    tar -xzf "$SRCDIR"/horovod-0.28.1.tar.gz -C "$SRCDIR" || fail "unpacking the sdist"
    for d in "$SRCDIR"/horovod-0.28.1/third_party/*/; do
      n=$(basename "$d")
      if [ -z "$(ls -A "$SRCDIR/horovod/third_party/$n" 2>/dev/null)" ]; then
        rm -rf "$SRCDIR/horovod/third_party/$n"; cp -a "$d" "$SRCDIR/horovod/third_party/$n"
      fi
    done
    target=$SRCDIR/horovod ;;
  *.tar.gz) target=$(realpath "$HOROVOD_SRC") ;;
  *) [ -f "$HOROVOD_SRC/setup.py" ] || fail "HOROVOD_SRC=$HOROVOD_SRC has no setup.py"
     target=$(realpath "$HOROVOD_SRC") ;;
esac

# --- build and install ---------------------------------------------------------------
start=$(date +%s)
env HOROVOD_WITH_PYTORCH=1 HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 \
    HOROVOD_WITH_GLOO=1 HOROVOD_WITH_MPI=1 \
    CC=gcc CXX=g++ \
    "$PY" -m pip install -v --no-cache-dir --no-build-isolation --no-deps "$target" >>"$LOG" 2>&1
rc=$?
secs=$(( $(date +%s) - start ))
if [ $rc -ne 0 ]; then
  echo "build.sh: pip install of Horovod failed (rc $rc) after ${secs}s; the first errors in $LOG:" >&2
  grep -nE 'error:|Error [0-9]|CMake Error|fatal error|undefined reference' "$LOG" | head -20 >&2
  echo "--- the log's last 30 lines ---" >&2
  tail -30 "$LOG" >&2
  fail "Horovod ${HOROVOD_SRC:-$HOROVOD_VERSION} did not build (full log: $LOG)"
fi

# --- check: both controllers and PyTorch ---------------------------------------------
cd /tmp || exit 1   # not a directory holding a horovod/ source tree
check=$("$VENV/bin/horovodrun" --check-build 2>&1)
echo "$check" >>"$LOG"
grep -q '\[X\] PyTorch' <<<"$check" || fail "built, but without PyTorch:
$check"
grep -q '\[X\] MPI' <<<"$check" || fail "built, but without the MPI controller:
$check"
grep -q '\[X\] Gloo' <<<"$check" || fail "built, but without the Gloo controller:
$check"
"$PY" -c 'import horovod.torch as hvd, torch; hvd.init(); assert hvd.size() == 1; print(hvd.allreduce(torch.ones(2)))' >>"$LOG" 2>&1 \
  || fail "import horovod.torch / hvd.init() in one process (see $LOG)"

ver=$("$PY" -c 'import horovod; print(horovod.__version__)' 2>/dev/null)
{
  echo "horovod $ver from ${HOROVOD_SRC:-PyPI sdist horovod==$HOROVOD_VERSION}, built $(date -u +%FT%TZ) in ${secs}s"
  echo "torch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)' 2>/dev/null), $(g++ --version | head -1), $("$PY" -V), $(mpirun --version 2>/dev/null | head -1)"
} > "$MARKER.tmp" && mv "$MARKER.tmp" "$MARKER"
rm -rf "$SRCDIR"
echo "build.sh: done: $(head -1 "$MARKER")" >&2
echo "$check" | sed -n '/Available Frameworks/,$p' >&2
echo "$VENV"
