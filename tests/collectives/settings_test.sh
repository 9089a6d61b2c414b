#!/usr/bin/env bash
# Ranks whose settings that must agree (config.h: job_wide_settings) differ fail
# at kolo::init(), on every rank, within BOUND_S, with one message naming the
# variable, each value and the ranks (and hosts) holding it: over shared memory,
# over TCP, between emulated hosts (KOLO_HOSTNAME, as_host.sh) and with no
# kolorun at all (torchrun-style variables: rank 0 hosts the store and must not
# cut the others off when it fails). Equal settings set differently (unset vs
# the default spelled out) are no difference.
#   settings_test.sh KOLORUN IDENTITY_BINARY
set -u
K=$1 BIN=$2
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../common/ports.sh"
BOUND_S=${BOUND_S:-10}
fails=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fail() { echo "FAIL $*"; fails=$((fails + 1)); }
ok() { echo "ok   $*"; }
now() { date +%s.%N; }
within() { awk -v a="$1" -v b="$2" -v c="$3" 'BEGIN { exit !(a - b <= c) }'; }

# A rank wrapper: `settings_for R VAR=value... -- CMD...` sets the variables only in rank R.
cat > "$tmp/only_rank.sh" <<'SH'
#!/bin/sh
r=$1; shift
while [ "$1" != "--" ]; do
  [ "$KOLO_RANK" = "$r" ] && export "$1"
  shift
done
shift
exec "$@"
SH
chmod +x "$tmp/only_rank.sh"

# expect_refused NAME PATTERN... -- KOLORUN_ARGS...: kolorun fails within BOUND_S, and a rank
# reports the difference, its message matching every PATTERN (extended regex); every rank that
# reports it says the same. (Every rank finds it, but kolorun stops the job at the first failure,
# so the others may be ended before they print.)
expect_refused() {
  local name=$1; shift
  local pats=()
  while [ "$1" != "--" ]; do pats+=("$1"); shift; done
  shift
  local t0 code t1 np=$2
  t0=$(now)
  timeout -s KILL 60 "$K" --timeout 60 "$@" > "$tmp/out" 2> "$tmp/err"
  code=$?
  t1=$(now)
  local good=1
  [ "$code" != 0 ] || { echo "  kolorun exited 0"; good=0; }
  within "$t1" "$t0" "$BOUND_S" || { echo "  took $(awk -v a="$t1" -v b="$t0" 'BEGIN{print a-b}') s"; good=0; }
  local reported=0
  for ((r = 0; r < np; r++)); do
    local line
    line=$(grep -A3 "^\[$r\] kolo rank $r: kolo's settings differ" "$tmp/err" | tr '\n' ' ')
    [ -n "$line" ] || continue
    reported=$((reported + 1))
    for p in "${pats[@]}"; do
      grep -qE -- "$p" <<< "$line" || { echo "  rank $r: /$p/ not in: $line"; good=0; }
    done
  done
  [ $reported -gt 0 ] || { echo "  no rank reported the difference"; good=0; }
  if [ $good = 1 ]; then ok "$name"; else fail "$name"; sed 's/^/    /' "$tmp/err" | tail -20; fi
}

host=$(hostname)
W=$tmp/only_rank.sh

# Shared memory (one host): a chunk size.
expect_refused "shm: KOLO_SHM_CHUNK differs" \
  "KOLO_SHM_CHUNK=262144 on rank 0 \(host $host\); KOLO_SHM_CHUNK=65536 on rank 1 \(host $host\)" -- \
  -np 2 "$W" 1 KOLO_SHM_CHUNK=65536 -- "$BIN"

# TCP: a transport (tcp vs auto) and, in one message, the ring segment.
KOLO_TRANSPORT=tcp expect_refused "tcp: KOLO_TRANSPORT and KOLO_RING_SEGMENT differ (3 ranks)" \
  "KOLO_TRANSPORT=tcp on ranks 0, 2 \(host $host\); KOLO_TRANSPORT=auto on rank 1 \(host $host\)" \
  "KOLO_RING_SEGMENT=1048576 on ranks 0, 2 \(host $host\); KOLO_RING_SEGMENT=4096 on rank 1" -- \
  -np 3 "$W" 1 KOLO_TRANSPORT=auto KOLO_RING_SEGMENT=4096 -- "$BIN"

# Emulated hosts a, b (two ranks each): host b's ranks run flat, host a's hierarchical.
expect_refused "hosts: KOLO_HIERARCHICAL differs between hosts" \
  "KOLO_HIERARCHICAL=1 on ranks 0, 1 \(host a\); KOLO_HIERARCHICAL=0 on ranks 2, 3 \(host b\)" -- \
  -np 4 "$HERE/as_host.sh" "a a b b" "$W" 2 KOLO_HIERARCHICAL=0 -- "$W" 3 KOLO_HIERARCHICAL=0 -- "$BIN"

# No kolorun: torchrun-style variables, rank 0 hosting the store; rank 1 turns verification off.
port=$(test_port)
t0=$(now)
pids=()
for r in 0 1; do
  extra=""
  [ $r = 1 ] && extra="KOLO_VERIFY_CALLS=0"
  env RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port $extra \
    timeout -s KILL 60 "$BIN" > "$tmp/tr.out.$r" 2> "$tmp/tr.err.$r" &
  pids+=($!)
done
good=1
for r in 0 1; do
  wait "${pids[$r]}"; code=$?
  [ $code != 0 ] || { echo "  rank $r exited 0"; good=0; }
  grep -q "kolo rank $r: kolo's settings differ" "$tmp/tr.err.$r" &&
    grep -q "KOLO_VERIFY_CALLS=1 on rank 0 (host $host); KOLO_VERIFY_CALLS=0 on rank 1 (host $host)" "$tmp/tr.err.$r" ||
    { echo "  rank $r:"; sed 's/^/    /' "$tmp/tr.err.$r"; good=0; }
done
within "$(now)" "$t0" "$BOUND_S" || { echo "  took longer than $BOUND_S s"; good=0; }
if [ $good = 1 ]; then ok "torchrun-style: KOLO_VERIFY_CALLS differs"; else fail "torchrun-style: KOLO_VERIFY_CALLS differs"; fi

# The same setting, once unset and once spelled out as the default: no difference.
if "$K" -np 2 "$W" 1 KOLO_SHM_CHUNK=262144 KOLO_TRANSPORT=auto -- "$BIN" > "$tmp/out" 2> "$tmp/err" &&
   [ "$(grep -c 'sum=3' "$tmp/out")" = 2 ]; then
  ok "a default spelled out is no difference"
else
  fail "a default spelled out is no difference"; cat "$tmp/out" "$tmp/err"
fi

[ $fails = 0 ] && echo "all passed" || echo "$fails failed"
exit $((fails > 0))
