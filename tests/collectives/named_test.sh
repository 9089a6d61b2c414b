#!/usr/bin/env bash
# Named operations (kolo_named, named.cc) on shared memory and TCP: issued in
# different orders, mismatched, duplicated, stalled, joined (Horovod's join)
# and left, and with a rank that dies mid-negotiation. Each run must end in
# time (never hang) with the expected output on every rank.
#   named_test.sh KOLORUN KOLO_NAMED
set -u
KOLORUN=$1 BIN=$2
fail=0
out=$(mktemp)
trap 'rm -f "$out"' EXIT

run() {  # transport np mode [env...]: runs one job into $out, returns kolorun's status
  local transport=$1 np=$2 mode=$3
  shift 3
  env KOLO_TRANSPORT="$transport" "$@" timeout 120 "$KOLORUN" -np "$np" "$BIN" "$mode" > "$out" 2>&1
}

bad() {
  echo "FAILED $1"
  sed 's/^/    /' "$out"
  fail=1
}

every_rank_ok() {  # label np
  local r
  for ((r = 0; r < $2; r++)); do
    grep -q "^\[$r\] ok$" "$out" || { bad "$1: rank $r did not print ok"; return; }
  done
  ! grep -q "FAILED" "$out" || { bad "$1"; return; }
  echo "ok: $1"
}

for transport in shm tcp; do
  for np in 2 3 4; do
    run "$transport" "$np" order && every_rank_ok "$transport/np$np/order" "$np" || bad "$transport/np$np/order: exit $?"
  done
  run "$transport" 3 mismatch && every_rank_ok "$transport/mismatch" 3 || bad "$transport/mismatch: exit $?"
  [ "$(grep -c "caught: .*named operation 'odd'" "$out")" = 3 ] || bad "$transport/mismatch: not every rank caught it"

  run "$transport" 3 duplicate && every_rank_ok "$transport/duplicate" 3 || bad "$transport/duplicate: exit $?"
  grep -q "^\[1\] caught: .*'dup'" "$out" || bad "$transport/duplicate: rank 1 did not catch it"
  ! grep -q "^\[[02]\] caught" "$out" || bad "$transport/duplicate: a rank other than 1 got an error"

  for mode in stall first-stall; do
    run "$transport" 2 "$mode" KOLO_STALL_WARN_MS=300 && every_rank_ok "$transport/$mode" 2 || bad "$transport/$mode: exit $?"
    if [ "$mode" = stall ]; then
      want="stall: named operation 'late' has been issued by rank 0 but not by rank 1"
    else
      want="stall: named operation(s) 'late', 'early' issued here have waited [0-9]* ms for rank 1, which issued no named operation yet"
    fi
    grep -q "^\[0\].*$want" "$out" || bad "$transport/$mode: rank 0 did not warn \"$want\""
  done

  # Horovod's join, 200 times; leaving it is collective (a named allreduce
  # issued right after must not run with a leaving rank's zeros).
  for np in 2 3 4; do
    run "$transport" "$np" join KOLO_TIMEOUT_MS=30000 && every_rank_ok "$transport/np$np/join" "$np" ||
      bad "$transport/np$np/join: exit $?"
  done

  start=$(date +%s)
  run "$transport" 3 die KOLO_TIMEOUT_MS=60000
  took=$(( $(date +%s) - start ))
  for r in 0 1; do
    grep -q "^\[$r\] caught: kolo rank $r:" "$out" || bad "$transport/die: rank $r got no error"
  done
  [ "$took" -lt 50 ] || bad "$transport/die: took $took s (a hang until a timeout?)"
  ! grep -q "FAILED" "$out" || bad "$transport/die"
  echo "ok: $transport/die ($took s)"
done
exit $fail
