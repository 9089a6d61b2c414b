#!/usr/bin/env bash
# Allreduce (f32 sum, in place) on N local ranks: kolo vs the anchors (Open MPI,
# PyTorch Gloo), measured IN ONE RUN, plus the memory-bandwidth ceiling.
#
#   bench/compare.sh [BUILD_DIR]            full run, writes bench/results/allreduce-np<N>-<host>-<date>.md
#   bench/compare.sh --quick [BUILD_DIR]    3 small sizes, 1 round, few iterations, writes nothing
#   bench/compare.sh --no-write [BUILD_DIR] a full run that prints the table and writes nothing
#   BEFORE=OLD_BUILD_DIR bench/compare.sh [BUILD_DIR]
#                                           the same with a second, older kolo build beside it
#
# The machine is noisy, so the systems are interleaved: every round runs each
# system on each size batch (sizes below 1 MiB, then the rest), rotating the
# order of the systems from round to round; the table holds the median over
# rounds per size, and the ratios are taken from those same-run medians.
# Iterations follow the anchors' defaults for every system: 200 below 1 MiB,
# 20 from 1 MiB on, after 3 warmup calls (ITERS overrides all of them).
#
# Before/after: to show that a change to kolo's core costs nothing, BEFORE names
# the build of the older kolo. It runs as one more system, "before", with the
# same kolo-bench command line but its own kolorun and kolo-bench, alternated
# round by round with the others like any system, so both builds see the same
# phases of the machine; timing them in separate runs would compare the noise
# of two periods. The table adds its column and after/before, kolo's time over
# before's per size, with the median and the worst of those over the sizes.
# SYSTEMS="kolo before" leaves the anchors out when only before/after matters.
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
#   OUT          results file (default bench/results/allreduce-np<N>-<host>-<date>.md,
#                with BEFORE allreduce-before-after-np<N>-<host>-<date>.md)
#   TIMEOUT_S    limit per program run (default 900)
#   BEFORE       build dir of an older kolo, run as the system "before" (see above)
#   BEFORE_LABEL its name in the results (default: the git revision of the source it
#                was configured from, with "-dirty" for uncommitted changes in the
#                library or tools; else "before")
#   SYSTEMS      systems to run, kolo among them, in their order for round 1
#                (default "kolo mpi gloo", with BEFORE "kolo before mpi gloo")
#   ANCHORS_BUILD where the anchors are compiled (default BUILD_DIR/compare-anchors;
#                set it to leave a shared build dir untouched)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
# kolo's own settings in the caller's environment (KOLO_TRANSPORT=tcp, ...)
# hold for every kolo run: the results say them. Read before this script
# exports its own KOLO_REV and KOLO_BUILD_TYPE for the table.
kolo_env=$(env | grep -E '^KOLO_[A-Z_]+=' | grep -vE '^KOLO_(BUILD|REV|BUILD_TYPE)=' | sort | tr '\n' ' ' || true)
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

if [ -n "${BEFORE:-}" ]; then
  d=$(cd "$BEFORE" 2>/dev/null && pwd) || { echo "compare.sh: no build dir BEFORE='$BEFORE'" >&2; exit 2; }
  BEFORE=$d
  SYSTEMS=${SYSTEMS:-"kolo before mpi gloo"}
fi
SYSTEMS=${SYSTEMS:-"kolo mpi gloo"}
read -r -a systems <<<"$SYSTEMS"
# Every ratio in the table is taken against kolo, so kolo always runs.
case " $SYSTEMS " in *" kolo "*) ;; *) echo "compare.sh: SYSTEMS='$SYSTEMS' has no kolo" >&2; exit 2 ;; esac
for s in "${systems[@]}"; do
  case "$s" in kolo|before|mpi|gloo) ;; *) echo "compare.sh: unknown system '$s' in SYSTEMS (kolo before mpi gloo)" >&2; exit 2 ;; esac
  [ "$(printf '%s\n' "${systems[@]}" | grep -cx "$s")" = 1 ] || { echo "compare.sh: '$s' twice in SYSTEMS" >&2; exit 2; }
done
runs() { case " ${systems[*]} " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
# A BEFORE that SYSTEMS leaves out would silently measure nothing before/after.
if runs before && [ -z "${BEFORE:-}" ]; then echo "compare.sh: SYSTEMS has 'before' but BEFORE is not set" >&2; exit 2; fi
if [ -n "${BEFORE:-}" ] && ! runs before; then echo "compare.sh: BEFORE is set but SYSTEMS='$SYSTEMS' has no 'before'" >&2; exit 2; fi

KOLORUN=$BUILD/tools/kolorun/kolorun
KOLO_BENCH=$BUILD/tools/kolo-bench/kolo-bench
BEFORE_KOLORUN=${BEFORE:-}/tools/kolorun/kolorun
BEFORE_BENCH=${BEFORE:-}/tools/kolo-bench/kolo-bench
for dir in "$BUILD" ${BEFORE:+"$BEFORE"}; do
  src=$ROOT
  [ "$dir" = "$BUILD" ] || src='<the older source>'
  for b in "$dir/tools/kolorun/kolorun" "$dir/tools/kolo-bench/kolo-bench"; do
    if [ ! -x "$b" ]; then
      echo "compare.sh: $b is missing; build it with" >&2
      echo "  cmake -S $src -B $dir -G Ninja -DKOLO_WITH_TORCH=OFF && ninja -C $dir kolo-bench kolorun" >&2
      exit 2
    fi
  done
done
need=(membw.c)
runs mpi && need+=(mpi_allreduce.c)
runs gloo && need+=(gloo_allreduce.py launch_torch.sh)
for f in "${need[@]}"; do
  [ -f "$ANCHORS/$f" ] || { echo "compare.sh: $ANCHORS/$f is missing (set ANCHORS)" >&2; exit 2; }
done

# --- the anchors, compiled next to kolo's build -----------------------------------
# membw runs every round whatever the systems: it is the ceiling in the header.
ABUILD=$(realpath -m "${ANCHORS_BUILD:-$BUILD/compare-anchors}")
mkdir -p "$ABUILD"
if runs mpi; then mpicc -O2 "$ANCHORS/mpi_allreduce.c" -o "$ABUILD/mpi_allreduce"; fi
gcc -O3 -march=native "$ANCHORS/membw.c" -o "$ABUILD/membw"

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
RAW=$WORK/raw.txt
: >"$RAW"

small="" large=""
for s in $SIZES; do
  if [ "$s" -lt "$SPLIT" ]; then small+="$s "; else large+="$s "; fi
done

# Command lines, as they are recorded in the results. Both kolo builds run the same
# line, each with its own kolorun and kolo-bench.
kolo_line() {  # kolorun kolo-bench sizes iters
  echo "$1 -np $NP --no-tag-output $2 -c allreduce -d f32 -o sum --inplace" \
       "--sizes '$3' -n $4 -w 3 --time-budget 0 --anchor-format"
}
kolo_cmd() { kolo_line "$KOLORUN" "$KOLO_BENCH" "$@"; }
before_cmd() { kolo_line "$BEFORE_KOLORUN" "$BEFORE_BENCH" "$@"; }
mpi_cmd() { echo "SIZES='$1' ITERS=$2 mpirun --allow-run-as-root --oversubscribe -np $NP -x SIZES -x ITERS $ABUILD/mpi_allreduce"; }
gloo_cmd() { echo "SIZES='$1' ITERS=$2 $ANCHORS/launch_torch.sh $NP /usr/bin/python3 $ANCHORS/gloo_allreduce.py"; }

# run SYSTEM ROUND SIZES ITERS: appends "<round> <anchor line>" to RAW; any
# failure (kolo-bench exits non-zero on a wrong result) stops the comparison.
# The before build's kolo-bench prints "kolo n=..." too; its lines are renamed
# "before n=..." so the raw file tells the two builds apart.
run() {
  local sys=$1 round=$2 sizes=$3 iters=$4 cmd out lines rc=0 tag=$1
  [ "$sys" != before ] || tag=kolo
  cmd=$("${sys}_cmd" "$sizes" "$iters")
  out=$(timeout "$TIMEOUT_S" bash -c "$cmd" 2>&1) || rc=$?
  if [ $rc -ne 0 ]; then
    echo "compare.sh: $sys failed (exit $rc): $cmd" >&2
    echo "$out" | tail -20 >&2
    exit 1
  fi
  lines=$(echo "$out" | grep -E "^$tag n=[0-9]+ bytes=" | sed "s/^$tag /$sys /" || true)
  if [ -z "$lines" ]; then
    echo "compare.sh: $sys printed no result lines: $cmd" >&2
    echo "$out" | tail -20 >&2
    exit 1
  fi
  echo "$lines" | sed "s/^/$round /" >>"$RAW"
  printf '  round %s %-6s %s sizes\n' "$round" "$sys" "$(echo "$lines" | wc -l)" >&2
}

load_start=$(cut -d' ' -f1-3 /proc/loadavg)
echo "compare.sh: ${systems[*]}; $NP ranks, sizes: $SIZES; $ROUNDS rounds; load average $load_start" >&2
for ((r = 1; r <= ROUNDS; r++)); do
  "$ABUILD/membw" | sed "s/^/$r /" >>"$RAW"
  for batch in small large; do
    sizes=${!batch}
    [ -n "$sizes" ] || continue
    iters=${ITERS:-$([ $batch = small ] && echo 200 || echo 20)}
    for ((k = 0; k < ${#systems[@]}; k++)); do
      run "${systems[(r - 1 + k) % ${#systems[@]}]}" "$r" "${sizes% }" "$iters"
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
if runs mpi; then export MPI_VERSION="$(mpirun --version 2>/dev/null | head -1)"; fi
if runs gloo; then export TORCH_VERSION="$(/usr/bin/python3 -c 'import torch; print(torch.__version__)' 2>/dev/null || echo '?')"; fi
# A build's revision is that of the source tree it was configured from, which need
# not be this script's repository (the lead's build, a worktree of the old commit).
# Whether the binaries are older than that source, nothing here can tell.
build_rev() {  # BUILD_DIR [SOURCE if the cache names none]: "<short rev>[ + uncommitted changes ...]", or "?"
  local src dirty
  src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$1/CMakeCache.txt" 2>/dev/null)
  src=${src:-${2:-}}
  [ -n "$src" ] || { echo '?'; return; }  # git -C "" would read the current directory
  dirty=$(git -C "$src" status --porcelain -- src include CMakeLists.txt tools 2>/dev/null | head -1)
  echo "$(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo '?')${dirty:+ + uncommitted changes in the library or tools}"
}
build_type() {  # BUILD_DIR
  local btype
  btype=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$1/CMakeCache.txt" 2>/dev/null)
  echo "${btype:-"RelWithDebInfo (the project's default)"}"
}
export KOLO_REV="$(build_rev "$BUILD" "$ROOT")" KOLO_BUILD_TYPE="$(build_type "$BUILD")"
if [ -n "${BEFORE:-}" ]; then
  export BEFORE_REV="$(build_rev "$BEFORE")" BEFORE_BUILD_TYPE="$(build_type "$BEFORE")" BEFORE
  rev=${BEFORE_REV%% *}
  [ "$BEFORE_REV" = "$rev" ] || rev+=-dirty
  [ "$rev" != '?' ] || rev=before
  export BEFORE_LABEL=${BEFORE_LABEL:-$rev}
  export CMD_BEFORE="$(before_cmd '<sizes>' '<iters>')"
fi
export ITERS_NOTE=${ITERS:+"ITERS=$ITERS for every size"}
export SETTINGS="${kolo_env}NP=$NP ROUNDS=$ROUNDS SIZES='$SIZES'${ITERS:+ ITERS=$ITERS}${BEFORE:+ BEFORE=$BEFORE}"
[ "$SYSTEMS" = "kolo mpi gloo" ] || [ "$SYSTEMS" = "kolo before mpi gloo" ] || SETTINGS+=" SYSTEMS='$SYSTEMS'"
export LOAD_START=$load_start LOAD_END=$load_end NP ROUNDS HOST_LABEL BUILD
export SMALL_ITERS=${ITERS:-200} LARGE_ITERS=${ITERS:-20}
export CMD_KOLO="$(kolo_cmd '<sizes>' '<iters>')" CMD_MPI="$(mpi_cmd '<sizes>' '<iters>')" CMD_GLOO="$(gloo_cmd '<sizes>' '<iters>')"
export DATE_UTC="$(date -u '+%Y-%m-%d %H:%M UTC')"

if [ "$WRITE" = 1 ]; then
  # A before/after run gets its own name: bench/charts.py draws the newest
  # allreduce-np2-*.md as the anchor comparison, and the day's file stays that.
  OUT=${OUT:-$ROOT/bench/results/allreduce${BEFORE:+-before-after}-np$NP-$HOST_LABEL-$(date +%Y-%m-%d).md}
  mkdir -p "$(dirname "$OUT")"
else
  OUT=""
fi
/usr/bin/python3 "$ROOT/bench/compare_table.py" "$RAW" "$OUT"
[ -z "$OUT" ] || echo "compare.sh: wrote $OUT" >&2
