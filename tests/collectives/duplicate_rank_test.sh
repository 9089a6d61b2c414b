#!/usr/bin/env bash
# Two processes that claim one rank (each rank of a kolorun job starts a second
# copy of itself, as a program with its own worker launcher does when it
# inherits kolorun's variables) are refused at kolo::init() with a message
# naming the rank, and the job ends: never a hang, never one job of mixed ranks.
#   duplicate_rank_test.sh KOLORUN IDENTITY_BINARY
set -u
K=$1 BIN=$2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
fails=0
for transport in shm tcp; do
  KOLO_TRANSPORT=$transport timeout 300 "$K" -np 2 --timeout 120 \
    /bin/sh -c '"$0" & p=$!; "$0"; a=$?; wait $p; exit $((a | $?))' "$BIN" > "$out" 2>&1
  rc=$?
  if [ $rc -eq 0 ] || [ $rc -eq 124 ]; then
    echo "FAIL $transport: exit $rc (expected a failed job, not success or a timeout):"; cat "$out"; fails=$((fails + 1))
  elif ! grep -Eq "rank [01] of 2 is already taken by another process \(this one: pid [0-9]+ on " "$out"; then
    echo "FAIL $transport: no duplicate-rank message:"; cat "$out"; fails=$((fails + 1))
  else
    echo "ok   $transport: exit $rc, $(grep -m1 -o 'rank [01] of 2 is already taken[^;]*' "$out")"
  fi
done
exit $fails
