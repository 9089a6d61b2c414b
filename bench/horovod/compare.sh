#!/usr/bin/env bash
# Horovod itself beside kolo (issue 20): the same programs on both, in one run, one command.
# Builds Horovod first if this machine has no build of it yet (bench/horovod/build.sh: long).
#
#   bench/horovod/compare.sh [BUILD_DIR]          full run; writes
#                                   bench/results/horovod-np2-np4-<host>-<date>.md
#   bench/horovod/compare.sh --quick [BUILD_DIR]  1 repetition, few steps, small sizes,
#                                   every case once: checks that everything runs; writes nothing
#   bench/horovod/compare.sh [...] -- ARGS        ARGS go to hvd_compare.py (--help lists them:
#                                   --parts, --systems, --np, --reps, --tuned, ...)
#   bench/horovod/compare.sh --no-hosts [...]     without the 2-emulated-hosts case
#
# Then, as root and unless --no-hosts or ARGS are given, bench/horovod/hosts.sh (same build,
# same Horovod, --quick with --quick): 2 emulated hosts x 2 ranks, its own results file. So one
# command runs the whole comparison.
#
# Cases, each for kolo (kolorun) and Horovod's Gloo and MPI controllers (horovodrun), each of
# those with Horovod's defaults and with its documented tuning:
#   - bench/python/horovod_step.py: the MLP and CNN step, 2 and 4 ranks (samples/s), beside
#     the ceiling (N independent 1-rank runs of it at once)
#   - hvd.allreduce_ 8 B, 1, 64, 256 MiB, 2 and 4 ranks (time per call)
#   - start-up to the first collective: kolorun -np 2 vs horovodrun -np 2 --gloo / --mpi
#   - timeline cost: the MLP step and the 8 B allreduce at 2 ranks, KOLO_TIMELINE /
#     HOROVOD_TIMELINE off vs on (defaults only)
#   - Horovod's examples/pytorch/pytorch_synthetic_benchmark.py (taken from the Horovod
#     snapshot at run time, never committed), --no-cuda, mobilenet_v3_small, 2 and 4 ranks
# First one 8-byte allreduce per launcher (a stale kolo build stops the run there).
# Interleaved: each repetition runs every system once per case, the order of the systems
# rotating; medians; ratios of same-run medians.
#
# Environment (all optional):
#   KOLO_BUILD      kolo build dir (default: the argument, else build/); needs
#                   tools/kolorun/kolorun and python/kolo (cmake --build BUILD)
#   HOROVOD_VENV    Horovod's venv (default: what build.sh builds or finds)
#   REPS            repetitions (default 3)
#   HOST_LABEL      machine name in the results file name (default: hostname, else "dev")
#   OUT             results file
#   TIMEOUT_S       limit per program run (default 900)
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE=$ROOT/bench/horovod
QUICK=0 WRITE=1 HOSTS=1 args=() extra=()
while [ $# -gt 0 ]; do
  case $1 in
    --quick) QUICK=1 ;;
    --no-write) WRITE=0 ;;
    --no-hosts) HOSTS=0 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "compare.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) args+=("$1") ;;
  esac
  shift
done
BUILD=${args[0]:-${KOLO_BUILD:-$ROOT/build}}
BUILD=$(cd "$BUILD" 2>/dev/null && pwd) || { echo "compare.sh: no build dir '${args[0]:-${KOLO_BUILD:-$ROOT/build}}'" >&2; exit 2; }
for f in "$BUILD/tools/kolorun/kolorun" "$BUILD/python/kolo"; do
  [ -e "$f" ] || { echo "compare.sh: $f is missing (build kolo: cmake --build $BUILD)" >&2; exit 2; }
done
/usr/bin/python3 -c 'import torchvision' 2>/dev/null || {
  echo "compare.sh: installing Debian's python3-torchvision (the synthetic benchmark's models)" >&2
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-torchvision; } >&2 \
    || { echo "compare.sh: apt-get install python3-torchvision failed" >&2; exit 2; }
}

if [ -n "${HOROVOD_VENV:-}" ]; then
  VENV=$HOROVOD_VENV
  [ -x "$VENV/bin/horovodrun" ] || { echo "compare.sh: $VENV/bin/horovodrun is missing" >&2; exit 2; }
else
  VENV=$("$HERE/build.sh" | tail -1) || { echo "compare.sh: Horovod did not build (above)" >&2; exit 2; }
fi

HOST_LABEL=${HOST_LABEL:-$(hostname -s 2>/dev/null || echo dev)}
opts=(--venv "$VENV" --timeout "${TIMEOUT_S:-900}" --reps "${REPS:-3}")
if [ "$QUICK" = 1 ]; then
  WRITE=0
  opts+=(--reps 1 --steps 5 --batch 16 --sizes "8 1048576" --iters "20,3,2"
         --synthetic-args "--batch-size 4 --num-warmup-batches 1 --num-batches-per-iter 1 --num-iters 2")
fi
if [ "$WRITE" = 1 ]; then
  OUT=${OUT:-$ROOT/bench/results/horovod-np2-np4-$HOST_LABEL-$(date -u +%F).md}
  opts+=(--out "$OUT")
elif [ -n "${OUT:-}" ]; then
  opts+=(--out "$OUT")
fi
cmdline="bench/horovod/compare.sh"
[ "$QUICK" = 1 ] && cmdline+=" --quick"
[ ${#extra[@]} -gt 0 ] && cmdline+=" -- ${extra[*]}"
source "$ROOT/bench/run_options.sh"
SNAP=$(snapshot_build "$BUILD") || { echo "compare.sh: cannot copy $BUILD's kolorun and python/ to /tmp" >&2; exit 2; }
trap 'rm -rf "$SNAP"' EXIT
KOLO_BUILD_LABEL="a copy of $(realpath --relative-to="$ROOT" "$BUILD")" \
  /usr/bin/python3 "$HERE/hvd_compare.py" "${opts[@]}" --build "$SNAP" --command "$cmdline" "${extra[@]}"
rc=$?
[ ${#extra[@]} -eq 0 ] || HOSTS=0   # a chosen part or system: only what was asked
if [ "$HOSTS" = 1 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "compare.sh: the 2-emulated-hosts case (bench/horovod/hosts.sh) needs root (network namespaces): left out" >&2
  else
    hargs=()
    [ "$QUICK" = 1 ] && hargs+=(--quick)
    [ "$WRITE" = 1 ] || hargs+=(--no-write)
    echo "compare.sh: the 2-emulated-hosts case: bench/horovod/hosts.sh ${hargs[*]}" >&2
    # Its own results file: OUT, if set, named this script's.
    env -u OUT HOROVOD_VENV="$VENV" "$HERE/hosts.sh" "${hargs[@]}" "$BUILD" || rc=1
  fi
fi
exit $rc
