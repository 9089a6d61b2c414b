#!/usr/bin/env bash
# Two kolorun jobs on one host at the same time, each running the allreduce
# checks over shared memory and then over TCP: no port or segment clashes,
# both pass, and no segment is left in /dev/shm.
#   concurrent_test.sh KOLORUN CHECK_BINARY
set -u
source "$(dirname "$0")/../private_shm.sh" "$@"  # a /dev/shm of its own (it checks all of it)
KOLORUN=$1 BIN=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
for transport in shm tcp; do
  KOLO_TRANSPORT=$transport "$KOLORUN" -np 3 --timeout 600 "$BIN" --filter allreduce > "$tmp/a" 2>&1 & a=$!
  KOLO_TRANSPORT=$transport "$KOLORUN" -np 3 --timeout 600 "$BIN" --filter allreduce > "$tmp/b" 2>&1 & b=$!
  wait $a; ra=$?
  wait $b; rb=$?
  for job in a b; do
    if grep -q "collectives: [0-9]* passed, 0 failed (3 ranks, transport $transport)" "$tmp/$job"; then
      echo "ok: concurrent job $job over $transport"
    else
      echo "FAILED: concurrent job $job over $transport:"; cat "$tmp/$job"; fail=1
    fi
  done
  [ $ra -eq 0 ] && [ $rb -eq 0 ] || { echo "FAILED: exit codes $ra and $rb"; fail=1; }
done
if ls /dev/shm | grep -q '^kolo-'; then echo "FAILED: segments left:"; ls /dev/shm | grep '^kolo-'; fail=1; fi
exit $fail
