#!/usr/bin/env bash
# Allreduce (f32 sum, in place) on N local ranks: kolo vs the anchors (Open MPI,
# PyTorch Gloo), measured IN ONE RUN, plus the memory-bandwidth ceiling.
#
#   bench/compare.sh [BUILD_DIR]            full run, writes bench/results/allreduce-np<N>-<host>-<date>.md
#   bench/compare.sh --quick [BUILD_DIR]    3 small sizes, 1 round, few iterations, writes nothing
#
# The machine is noisy, so the systems are interleaved: every round runs each
# system on each size batch (sizes below 1 MiB, then the rest), rotating the
# order of the systems from round to round; the table holds the median over
# rounds per size, and the ratios are taken from those same-run medians.
# Iterations follow the anchors' defaults for every system: 200 below 1 MiB,
# 20 from 1 MiB on, after 3 warmup calls (ITERS overrides all of them).
#
# Environment (all optional):
#   KOLO_BUILD   kolo build dir with tools/kolorun/kolorun and tools/kolo-bench/kolo-bench
#                (default: the argument, else build/)
#   NP           ranks (default 2)
#   SIZES        bytes, space separated (default 8 16 64 ... 256 MiB, powers of 4 from 16)
#   ITERS        timed iterations for every size and system (default: as the anchors)
#   ROUNDS       rounds (default 3)
#   ANCHORS      anchor sources (default ../shared/anchors next to the repository)
#   HOST_LABEL   host name in the results file name (default: hostname, else "dev")
#   OUT          results file (default bench/results/allreduce-np<N>-<host>-<date>.md)
#   TIMEOUT_S    limit per program run (default 900)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
QUICK=0
WRITE=1
args=()
for a in "$@"; do
  case "$a" in
    --quick) QUICK=1 ;;
    --no-write) WRITE=0 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "compare.sh: unknown option $a (see --help)" >&2; exit 2 ;;
    *) args+=("$a") ;;
  esac
done
BUILD=${args[0]:-${KOLO_BUILD:-$ROOT/build}}
BUILD=$(cd "$BUILD" 2>/dev/null && pwd) || { echo "compare.sh: no build dir '${args[0]:-${KOLO_BUILD:-$ROOT/build}}'" >&2; exit 2; }
NP=${NP:-2}
ANCHORS=$(realpath -m "${ANCHORS:-$ROOT/../shared/anchors}")
ROUNDS=${ROUNDS:-3}
TIMEOUT_S=${TIMEOUT_S:-900}
if [ "$QUICK" = 1 ]; then
  SIZES=${SIZES:-"8 4096 65536"}
  ITERS=${ITERS:-5}
  ROUNDS=1
  WRITE=0
fi
SIZES=${SIZES:-"8 16 64 256 1024 4096 16384 65536 262144 1048576 4194304 16777216 67108864 268435456"}
SPLIT=1048576  # the anchors' own switch between 200 and 20 iterations

KOLORUN=$BUILD/tools/kolorun/kolorun
KOLO_BENCH=$BUILD/tools/kolo-bench/kolo-bench
for b in "$KOLORUN" "$KOLO_BENCH"; do
  if [ ! -x "$b" ]; then
    echo "compare.sh: $b is missing; build it with" >&2
    echo "  cmake -S $ROOT -B $BUILD -G Ninja -DKOLO_WITH_TORCH=OFF && ninja -C $BUILD kolo-bench kolorun" >&2
    exit 2
  fi
done
for f in mpi_allreduce.c membw.c gloo_allreduce.py launch_torch.sh; do
  [ -f "$ANCHORS/$f" ] || { echo "compare.sh: $ANCHORS/$f is missing (set ANCHORS)" >&2; exit 2; }
done

# --- the anchors, compiled next to kolo's build -----------------------------------
ABUILD=$BUILD/compare-anchors
mkdir -p "$ABUILD"
mpicc -O2 "$ANCHORS/mpi_allreduce.c" -o "$ABUILD/mpi_allreduce"
gcc -O3 -march=native "$ANCHORS/membw.c" -o "$ABUILD/membw"

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
RAW=$WORK/raw.txt
: >"$RAW"

small="" large=""
for s in $SIZES; do
  if [ "$s" -lt "$SPLIT" ]; then small+="$s "; else large+="$s "; fi
done

# Command lines, as they are recorded in the results.
kolo_cmd() {  # sizes iters
  echo "$KOLORUN -np $NP --no-tag-output $KOLO_BENCH -c allreduce -d f32 -o sum --inplace" \
       "--sizes '$1' -n $2 -w 3 --time-budget 0 --anchor-format"
}
mpi_cmd() { echo "SIZES='$1' ITERS=$2 mpirun --allow-run-as-root --oversubscribe -np $NP -x SIZES -x ITERS $ABUILD/mpi_allreduce"; }
gloo_cmd() { echo "SIZES='$1' ITERS=$2 $ANCHORS/launch_torch.sh $NP /usr/bin/python3 $ANCHORS/gloo_allreduce.py"; }

# run SYSTEM ROUND SIZES ITERS: appends "<round> <anchor line>" to RAW; any
# failure (kolo-bench exits non-zero on a wrong result) stops the comparison.
run() {
  local sys=$1 round=$2 sizes=$3 iters=$4 cmd out lines rc=0
  cmd=$("${sys}_cmd" "$sizes" "$iters")
  out=$(timeout "$TIMEOUT_S" bash -c "$cmd" 2>&1) || rc=$?
  if [ $rc -ne 0 ]; then
    echo "compare.sh: $sys failed (exit $rc): $cmd" >&2
    echo "$out" | tail -20 >&2
    exit 1
  fi
  lines=$(echo "$out" | grep -E "^$sys n=[0-9]+ bytes=" || true)
  if [ -z "$lines" ]; then
    echo "compare.sh: $sys printed no result lines: $cmd" >&2
    echo "$out" | tail -20 >&2
    exit 1
  fi
  echo "$lines" | sed "s/^/$round /" >>"$RAW"
  printf '  round %s %-5s %s sizes\n' "$round" "$sys" "$(echo "$lines" | wc -l)" >&2
}

load_start=$(cut -d' ' -f1-3 /proc/loadavg)
echo "compare.sh: $NP ranks, sizes: $SIZES; $ROUNDS rounds; load average $load_start" >&2
systems=(kolo mpi gloo)
for ((r = 1; r <= ROUNDS; r++)); do
  "$ABUILD/membw" | sed "s/^/$r /" >>"$RAW"
  for batch in small large; do
    sizes=${!batch}
    [ -n "$sizes" ] || continue
    iters=${ITERS:-$([ $batch = small ] && echo 200 || echo 20)}
    for ((k = 0; k < 3; k++)); do
      run "${systems[(r - 1 + k) % 3]}" "$r" "${sizes% }" "$iters"
    done
  done
done
load_end=$(cut -d' ' -f1-3 /proc/loadavg)

# --- machine and versions, for the results header ----------------------------------
HOST_LABEL=${HOST_LABEL:-$(hostname -s 2>/dev/null || true)}
HOST_LABEL=${HOST_LABEL:-dev}
export CPU_MODEL=$(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1)
export CPU_INFO="$(nproc) CPUs ($(lscpu | sed -n 's/^Socket(s):[[:space:]]*//p') socket(s) x $(lscpu | sed -n 's/^Core(s) per socket:[[:space:]]*//p') cores x $(lscpu | sed -n 's/^Thread(s) per core:[[:space:]]*//p') threads)"
export MEM_INFO="$(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
export KERNEL="$(uname -sr)"
export MPI_VERSION="$(mpirun --version 2>/dev/null | head -1)"
export TORCH_VERSION="$(/usr/bin/python3 -c 'import torch; print(torch.__version__)' 2>/dev/null || echo '?')"
dirty=$(git -C "$ROOT" status --porcelain -- src include CMakeLists.txt tools 2>/dev/null | head -1)
export KOLO_REV="$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')${dirty:+ + uncommitted changes in the library or tools}"
btype=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$BUILD/CMakeCache.txt" 2>/dev/null)
export KOLO_BUILD_TYPE=${btype:-"RelWithDebInfo (the project's default)"}
export ITERS_NOTE=${ITERS:+"ITERS=$ITERS for every size"}
export SETTINGS="NP=$NP ROUNDS=$ROUNDS SIZES='$SIZES'${ITERS:+ ITERS=$ITERS}"
export LOAD_START=$load_start LOAD_END=$load_end NP ROUNDS HOST_LABEL BUILD
export SMALL_ITERS=${ITERS:-200} LARGE_ITERS=${ITERS:-20}
export CMD_KOLO="$(kolo_cmd '<sizes>' '<iters>')" CMD_MPI="$(mpi_cmd '<sizes>' '<iters>')" CMD_GLOO="$(gloo_cmd '<sizes>' '<iters>')"
export DATE_UTC="$(date -u '+%Y-%m-%d %H:%M UTC')"

if [ "$WRITE" = 1 ]; then
  OUT=${OUT:-$ROOT/bench/results/allreduce-np$NP-$HOST_LABEL-$(date +%Y-%m-%d).md}
  mkdir -p "$(dirname "$OUT")"
else
  OUT=""
fi
/usr/bin/python3 "$ROOT/bench/compare_table.py" "$RAW" "$OUT"
[ -z "$OUT" ] || echo "compare.sh: wrote $OUT" >&2
