#!/usr/bin/env bash
# Allreduce (f32 sum, in place) across 2 emulated hosts x 2 ranks, on a link shaped to
# 2 Gbit/s and on the unshaped one: kolo hierarchical (default), kolo flat
# (KOLO_HIERARCHICAL=0), Open MPI (mpirun -H over the hosts' ssh) and PyTorch Gloo
# (torchrun-style variables on each host), IN ONE RUN, with the link's own rate (iperf3).
# Needs root (network namespaces; tests/multihost/hosts.sh builds and removes the hosts).
#
#   bench/multihost/allreduce_hosts.sh [BUILD_DIR]          full run, writes
#                                    bench/results/allreduce-2hosts-<host>-<date>.md
#   bench/multihost/allreduce_hosts.sh --quick [BUILD_DIR]  3 small sizes, 1 round, writes nothing
#
# Every round runs each system on each size batch (below 1 MiB, 1-16 MiB, from 64 MiB),
# rotating the order of the systems from round to round; the table holds the medians over
# rounds and the ratios of those same-run medians.
#
# Environment (all optional):
#   KOLO_BUILD   build dir with tools/kolo-bench/kolo-bench (and tools/kolorun/kolorun)
#   SIZES        bytes (default 8 16 64 ... 256 MiB, powers of 4 from 16)
#   ROUNDS       rounds per link (default 3)
#   RATE         the shaped link's rate (tc tbf syntax, default 2gbit)
#   LINKS        which links to run, in order (default "shaped unshaped")
#   LAUNCH       how kolo's ranks start: "kolorun" (kolorun -H over ssh) or "env"
#                (torchrun-style variables, one kh_exec per rank); default kolorun when this
#                kolorun has -H, else env
#   ANCHORS      anchor sources (default ../shared/anchors next to the repository)
#   HOST_LABEL   machine name in the results file name (default: hostname, else "dev")
#   OUT          results file
#   TIMEOUT_S    limit per program run (default 900)
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
source "$ROOT/bench/run_options.sh"
bench_options "$0" "$@"
ANCHORS=$(realpath -m "${ANCHORS:-$ROOT/../shared/anchors}")
ROUNDS=${ROUNDS:-3}
RATE=${RATE:-2gbit}
LINKS=${LINKS:-"shaped unshaped"}
TIMEOUT_S=${TIMEOUT_S:-900}
IPERF_S=5
if [ "$QUICK" = 1 ]; then
  SIZES=${SIZES:-"8 4096 65536"}
  ROUNDS=1 WRITE=0 IPERF_S=1
fi
SIZES=${SIZES:-"8 16 64 256 1024 4096 16384 65536 262144 1048576 4194304 16777216 67108864 268435456"}
NP=4 PER_HOST=2

KOLO_BENCH=$BUILD/tools/kolo-bench/kolo-bench
KOLORUN=$BUILD/tools/kolorun/kolorun
[ -x "$KOLO_BENCH" ] || { echo "allreduce_hosts.sh: $KOLO_BENCH is missing (ninja -C $BUILD kolo-bench kolorun)" >&2; exit 2; }
for f in mpi_allreduce.c gloo_allreduce.py; do
  [ -f "$ANCHORS/$f" ] || { echo "allreduce_hosts.sh: $ANCHORS/$f is missing (set ANCHORS)" >&2; exit 2; }
done
for c in mpicc mpirun iperf3 /usr/bin/python3; do
  command -v "$c" >/dev/null || { echo "allreduce_hosts.sh: $c is missing (scripts/install-deps.sh)" >&2; exit 2; }
done
if [ -z "${LAUNCH:-}" ]; then
  LAUNCH=env
  [ -x "$KOLORUN" ] && grep -q -- '--hostfile' <<<"$("$KOLORUN" --help 2>&1)" && LAUNCH=kolorun  # not a pipe: pipefail + grep -q
fi

ABUILD=$BUILD/compare-anchors
mkdir -p "$ABUILD"
mpicc -O2 "$ANCHORS/mpi_allreduce.c" -o "$ABUILD/mpi_allreduce" || exit 1

source "$ROOT/tests/multihost/hosts.sh"
WORK=$(mktemp -d /tmp/allreduce-hosts.XXXXXX)
kh_on_down "rm -rf '$WORK'"
kh_up 2 || exit 1
RAW=$WORK/raw.txt
: >"$RAW"
A0=$(kh_addr h0) A1=$(kh_addr h1)

# --- one program run per system; each prints anchor-format lines on h0 ------------------
# Ranks 0,1 on h0 and 2,3 on h1, as every launcher below places them. Every program runs
# under `timeout` inside its host.
T="timeout $TIMEOUT_S"
kolo_env() {  # kolo_env HIER SIZES ITERS: 4 ranks, torchrun-style variables, one per kh_exec
  local hier=$1 sizes=$2 iters=$3 port=$((20000 + RANDOM % 20000)) r pids=() rc=0
  for r in 3 2 1; do
    kh_exec "h$((r / PER_HOST))" env RANK=$r WORLD_SIZE=$NP LOCAL_RANK=$((r % PER_HOST)) LOCAL_WORLD_SIZE=$PER_HOST \
      MASTER_ADDR="$A0" MASTER_PORT=$port KOLO_HIERARCHICAL="$hier" \
      $T "$KOLO_BENCH" -c allreduce -d f32 -o sum --inplace --sizes "$sizes" -n "$iters" -w 3 --time-budget 0 \
      >/dev/null 2>"$WORK/rank$r.err" &
    pids+=($!)
  done
  kh_exec h0 env RANK=0 WORLD_SIZE=$NP LOCAL_RANK=0 LOCAL_WORLD_SIZE=$PER_HOST MASTER_ADDR="$A0" MASTER_PORT=$port \
    KOLO_HIERARCHICAL="$hier" \
    $T "$KOLO_BENCH" -c allreduce -d f32 -o sum --inplace --sizes "$sizes" -n "$iters" -w 3 --time-budget 0 --anchor-format || rc=$?
  for r in "${pids[@]}"; do wait "$r" || rc=$?; done
  [ $rc = 0 ] || cat "$WORK"/rank*.err >&2
  return $rc
}
kolo_kolorun() {
  kh_exec h0 $T "$KOLORUN" -H "h0:$PER_HOST,h1:$PER_HOST" --rsh "ssh -F $KH_SSH_CONFIG" \
    -x KOLO_HIERARCHICAL="$1" --no-tag-output \
    "$KOLO_BENCH" -c allreduce -d f32 -o sum --inplace --sizes "$2" -n "$3" -w 3 --time-budget 0 --anchor-format
}
run_kolo_hier() { "kolo_$LAUNCH" 1 "$@"; }
run_kolo_flat() { "kolo_$LAUNCH" 0 "$@"; }
# When the 4 ranks outnumber the machine's cores, Open MPI is told so (it cannot see that the
# "hosts" share cores): no binding, yield when idle -- what it picks itself when oversubscribed.
# Busy-polling ranks pinned two to a core run ~10x slower here.
MPI_OVERSUB=()
[ "$(nproc)" -lt $NP ] && MPI_OVERSUB=(--bind-to none --mca mpi_yield_when_idle 1)
run_mpi() {
  kh_exec h0 env SIZES="$1" ITERS="$2" $T mpirun --allow-run-as-root -np $NP -H "h0:$PER_HOST,h1:$PER_HOST" \
    --mca plm_rsh_agent "ssh -F $KH_SSH_CONFIG" --mca btl self,vader,tcp --mca btl_tcp_if_include eth0 \
    --mca oob_tcp_if_include eth0 "${MPI_OVERSUB[@]}" -x SIZES -x ITERS "$ABUILD/mpi_allreduce"
}
run_gloo() {  # torchrun-style variables on each host, Gloo on eth0
  local port=$((20000 + RANDOM % 20000)) r pids=() rc=0
  for r in 3 2 1 0; do
    kh_exec "h$((r / PER_HOST))" env RANK=$r WORLD_SIZE=$NP LOCAL_RANK=$((r % PER_HOST)) LOCAL_WORLD_SIZE=$PER_HOST \
      MASTER_ADDR="$A0" MASTER_PORT=$port GLOO_SOCKET_IFNAME=eth0 SIZES="$1" ITERS="$2" \
      $T /usr/bin/python3 "$ANCHORS/gloo_allreduce.py" >"$WORK/gloo$r.out" 2>&1 &
    pids+=($!)
  done
  for r in "${pids[@]}"; do wait "$r" || rc=$?; done
  cat "$WORK/gloo0.out"
  [ $rc = 0 ] || cat "$WORK"/gloo*.out >&2
  return $rc
}

# run SYSTEM LINK ROUND SIZES ITERS: appends "<link> <round> <system> <anchor fields>" to RAW.
run() {
  local sys=$1 link=$2 round=$3 sizes=$4 iters=$5 out rc=0 lines tag
  out=$("run_$sys" "$sizes" "$iters" 2>&1) || rc=$?
  if [ $rc -ne 0 ]; then
    echo "allreduce_hosts.sh: $sys failed (exit $rc) on sizes $sizes" >&2
    echo "$out" | tail -20 >&2
    for h in h0 h1; do echo "--- $h: sshd log; processes"; tail -n 5 "$KH_DIR/$h/sshd.log"
      for p in $(kh_pids $h); do echo "$p $(tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null)"; done; done >&2
    exit 1
  fi
  tag=${sys%%_*}                                 # kolo_hier/kolo_flat print "kolo n=..."
  lines=$(grep -E "^$tag n=[0-9]+ bytes=" <<<"$out" | sed "s/^$tag /$sys /")
  [ -n "$lines" ] || { echo "allreduce_hosts.sh: $sys printed no result lines" >&2; echo "$out" | tail -20 >&2; exit 1; }
  sed "s/^/$link $round /" <<<"$lines" >>"$RAW"
  [[ $sys == kolo* ]] && grep -m1 '^# kolo-bench allreduce' <<<"$out" | sed "s/^/$link $round $sys header /" >>"$RAW"
  printf '  %-8s round %s %-9s %s sizes\n' "$link" "$round" "$sys" "$(wc -l <<<"$lines")" >&2
}

# The link's own rate each way (iperf3, TCP, one stream), in bit/s.
measure_link() {  # LINK ROUND
  local dir bps srv
  kh_exec h1 iperf3 -s -B "$A1" -D -I "$WORK/iperf3.pid" >/dev/null 2>&1 || { echo "allreduce_hosts.sh: iperf3 -s failed" >&2; exit 1; }
  for _ in $(seq 1 50); do [ -n "$(kh_exec h1 ss -Hltn "sport = :5201")" ] && break; sleep 0.1; done
  srv=$(cat "$WORK/iperf3.pid")
  for dir in fwd rev; do
    bps=$(kh_exec h0 timeout 60 iperf3 -c "$A1" -t "$IPERF_S" $([ $dir = rev ] && echo -R) -J |
          /usr/bin/python3 -c 'import json,sys; print(int(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]))')
    [ -n "$bps" ] || { echo "allreduce_hosts.sh: iperf3 h0 -> h1 ($dir) failed" >&2; exit 1; }
    echo "$1 $2 link dir=$dir bps=$bps" >>"$RAW"
  done
  kill "$srv"
}

small="" mid="" big=""
for s in $SIZES; do
  if [ "$s" -lt 1048576 ]; then small+="$s "; elif [ "$s" -le 16777216 ]; then mid+="$s "; else big+="$s "; fi
done
declare -A ITERS_OF=([small]=200 [mid]=20 [big]=5)
[ "$QUICK" = 1 ] && ITERS_OF=([small]=5 [mid]=3 [big]=2)

load_start=$(cut -d' ' -f1-3 /proc/loadavg)
echo "allreduce_hosts.sh: 2 hosts x $PER_HOST ranks, kolo launched by $LAUNCH; links: $LINKS ($RATE); $ROUNDS rounds; load $load_start" >&2
systems=(kolo_hier kolo_flat mpi gloo)
for link in $LINKS; do
  if [ "$link" = shaped ]; then kh_shape h0 "$RATE" && kh_shape h1 "$RATE" || exit 1
  else kh_unshape h0; kh_unshape h1; fi
  for ((r = 1; r <= ROUNDS; r++)); do
    measure_link "$link" "$r"
    for batch in small mid big; do
      sizes=${!batch}
      [ -n "$sizes" ] || continue
      for ((k = 0; k < ${#systems[@]}; k++)); do
        run "${systems[(r - 1 + k) % ${#systems[@]}]}" "$link" "$r" "${sizes% }" "${ITERS_OF[$batch]}"
      done
    done
  done
done
load_end=$(cut -d' ' -f1-3 /proc/loadavg)

# The report: hosts_table.py describes the machine and versions itself.
HOST_LABEL=${HOST_LABEL:-$(hostname -s 2>/dev/null || echo dev)}
dirty=$(git -C "$ROOT" status --porcelain -- src include CMakeLists.txt tools 2>/dev/null | head -1)
export KOLO_REV="$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')${dirty:+ + uncommitted changes in the library or tools}"
export SETTINGS="ROUNDS=$ROUNDS RATE=$RATE LINKS='$LINKS' LAUNCH=$LAUNCH SIZES='$SIZES'; Open MPI options: ${MPI_OVERSUB[*]:-none}"
export ITERS_NOTE="${ITERS_OF[small]} timed iterations below 1 MiB, ${ITERS_OF[mid]} for 1-16 MiB, ${ITERS_OF[big]} above; 3 warm-up calls"
export LOAD_START=$load_start LOAD_END=$load_end HOST_LABEL RATE LAUNCH
OUT=${OUT:-$ROOT/bench/results/allreduce-2hosts-$HOST_LABEL-$(date +%Y-%m-%d).md}
[ "$WRITE" = 1 ] || OUT=""
/usr/bin/python3 "$ROOT/bench/multihost/hosts_table.py" "$RAW" "$OUT" || exit 1
[ -z "$OUT" ] || echo "allreduce_hosts.sh: wrote $OUT" >&2
