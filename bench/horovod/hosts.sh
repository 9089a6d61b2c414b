#!/usr/bin/env bash
# Horovod beside kolo across 2 emulated hosts x 2 ranks (issue 20): hvd.allreduce_ f32 sum in
# place, on a tbf-shaped link and on the unshaped one, kolo (kolorun -H over the hosts' ssh,
# its hierarchical allreduce, the default) vs Horovod's Gloo and MPI controllers (horovodrun
# -H over the hosts' ssh, HOROVOD_HIERARCHICAL_ALLREDUCE=1 as the issue asks). Needs root
# (network namespaces: tests/multihost/hosts.sh builds and removes the hosts, as
# bench/multihost/allreduce_hosts.sh).
#
#   bench/horovod/hosts.sh [BUILD_DIR]          full run, writes
#                                 bench/results/horovod-2hosts-<host>-<date>.md
#   bench/horovod/hosts.sh --quick [BUILD_DIR]  2 small sizes, 1 repetition, writes nothing
#
# Note: Horovod 0.28.1 turns HOROVOD_HIERARCHICAL_ALLREDUCE off unless it was built with NCCL
# or DDL (horovod/common/operations.cc: "Hierarchical allreduce is not supported without NCCL
# or DDL"), so on CPU both controllers run their flat allreduce with it set; it is set anyway
# so the runs are what the issue names.
#
# Environment (all optional):
#   KOLO_BUILD   kolo build dir (default: the argument, else build/)
#   HOROVOD_VENV Horovod's venv (default: what build.sh builds or finds)
#   SIZES        bytes (default "8 16777216 67108864 268435456")
#   REPS         repetitions per link (default 3)
#   RATE         the shaped link's rate (tc tbf syntax, default 2gbit)
#   LINKS        which links, in order (default "shaped unshaped")
#   HOST_LABEL   machine name in the results file name (default: hostname, else "dev")
#   OUT          results file
#   TIMEOUT_S    limit per program run (default 900)
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE=$ROOT/bench/horovod
source "$ROOT/bench/run_options.sh"
bench_options "$0" "$@"
[ -x "$BUILD/tools/kolorun/kolorun" ] || { echo "hosts.sh: $BUILD/tools/kolorun/kolorun is missing" >&2; exit 2; }
# A here-string, not a pipe: with pipefail, grep -q's early exit fails the pipe (SIGPIPE).
grep -q -- '--rsh' <<<"$("$BUILD/tools/kolorun/kolorun" --help 2>&1)" || { echo "hosts.sh: this kolorun has no -H/--rsh" >&2; exit 2; }
REPS=${REPS:-3} RATE=${RATE:-2gbit} LINKS=${LINKS:-"shaped unshaped"}
SIZES=${SIZES:-"8 16777216 67108864 268435456"}
ITERS="200,20,5"
if [ "$QUICK" = 1 ]; then
  SIZES="8 1048576" REPS=1 WRITE=0 ITERS="20,3,2"
fi
if [ -n "${HOROVOD_VENV:-}" ]; then VENV=$HOROVOD_VENV
else VENV=$("$HERE/build.sh" | tail -1) || { echo "hosts.sh: Horovod did not build (above)" >&2; exit 2; }; fi

source "$ROOT/tests/multihost/hosts.sh"
WORK=$(mktemp -d /tmp/hvd-hosts.XXXXXX)
kh_on_down "rm -rf '$WORK'"
SNAP=$(snapshot_build "$BUILD") || { echo "hosts.sh: cannot copy $BUILD's kolorun and python/ to /tmp" >&2; exit 2; }
kh_on_down "rm -rf '$SNAP'"
export KOLO_BUILD_LABEL="a copy of $(realpath --relative-to="$ROOT" "$BUILD")"
kh_up 2 || exit 1
PREFIX="nsenter -t $(kh_holder h0) -n -u -i -m -r --wd=$ROOT --"

HOST_LABEL=${HOST_LABEL:-$(hostname -s 2>/dev/null || echo dev)}
OUT=${OUT:-$ROOT/bench/results/horovod-2hosts-$HOST_LABEL-$(date -u +%F).md}
[ "$WRITE" = 1 ] || OUT=""
rc=0
for link in $LINKS; do
  if [ "$link" = shaped ]; then kh_shape h0 "$RATE" && kh_shape h1 "$RATE" || exit 1; note="link shaped to $RATE each way (tc tbf on both hosts' ports)"
  else kh_unshape h0; kh_unshape h1; note="link unshaped (veth pair through a bridge)"; fi
  /usr/bin/python3 "$HERE/hvd_compare.py" --build "$SNAP" --venv "$VENV" --parts allreduce \
    --systems kolo,hvd-gloo,hvd-mpi --hvd-env HOROVOD_HIERARCHICAL_ALLREDUCE=1 \
    --hosts h0:2,h1:2 --rsh "ssh -F $KH_SSH_CONFIG" --iface eth0 --exec-prefix "$PREFIX" \
    --sizes "$SIZES" --iters "$ITERS" --reps "$REPS" --timeout "${TIMEOUT_S:-900}" \
    --title "Horovod beside kolo across 2 emulated hosts x 2 ranks, $link link" \
    --note "$note; hosts: network namespaces on one machine (tests/multihost/hosts.sh)" \
    --note "HOROVOD_HIERARCHICAL_ALLREDUCE=1 is a no-op on CPU: Horovod 0.28.1 forces it off without NCCL or DDL (horovod/common/operations.cc); both controllers run their flat allreduce" \
    --command "bench/horovod/hosts.sh$([ "$QUICK" = 1 ] && echo ' --quick')" \
    --out "$WORK/$link.md" || rc=1
done
if [ -n "$OUT" ]; then
  for link in $LINKS; do cat "$WORK/$link.md"; echo; done > "$OUT"
  echo "hosts.sh: wrote $OUT" >&2
fi
exit $rc
