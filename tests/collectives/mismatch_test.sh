#!/usr/bin/env bash
# Mismatched collectives on 3 ranks, both transports, and hierarchical
# between emulated hosts (as_host.sh; the odd rank 1 a host's second rank,
# "a a b", or a host's leader, "a b b"): every rank must fail with the
# mismatch error showing both calls, and kolorun must exit non-zero.
#   mismatch_test.sh KOLORUN MISMATCH_BINARY
set -u
KOLORUN=$1 BIN=$2
fail=0
out=$(mktemp)
dir=$(mktemp -d)
trap 'rm -rf "$out" "$dir"' EXIT

# The 32 bits of a shape's hash that an error shows, computed here apart from
# kolo: splitmix64's finaliser over the number of dimensions, then each dimension; low bit set.
shape_hash() {
  python3 - "$@" <<'EOF'
import sys
M = (1 << 64) - 1
def mix(x):
    x = ((x ^ (x >> 30)) * 0xbf58476d1ce4e5b9) & M
    x = ((x ^ (x >> 27)) * 0x94d049bb133111eb) & M
    return x ^ (x >> 31)
dims = [int(d) for d in sys.argv[1:]]
h = mix(len(dims))
for d in dims:
    h = mix(h ^ (d & M))
print(f"{(h | 1) >> 32:08x}")
EOF
}

check() {  # transport kind expected-call-of-rank-1 expected-call-of-rank-0
  local transport=$1 kind=$2 odd=$3 even=$4 kolo_transport=$1 wrap=()
  case $transport in
    hier-*) kolo_transport=auto wrap=("$(dirname "$0")/as_host.sh" "$(sed 's/hier-//; s/./& /g' <<< "$transport")") ;;
  esac
  # Files of this transport's own: the transports run at once (below).
  local out=$dir/$transport.out done=$dir/$transport.done
  rm -rf "$done" && mkdir -p "$done"
  KOLO_TRANSPORT=$kolo_transport timeout 120 "$KOLORUN" -np 3 "${wrap[@]}" "$BIN" "$kind" "$done" > "$out" 2>&1
  local rc=$?
  local ok=1
  [ $rc -ne 0 ] || { echo "FAILED $transport/$kind: kolorun exited 0"; ok=0; }
  for r in 0 1 2; do
    local line
    # The rank's error (with any causes its peers reported, on the lines
    # after it) shows rank 1's call and the others' call at collective #6.
    line=$(grep "^\[$r\] " "$out")
    grep -q "^\[$r\] caught: kolo rank $r:" "$out" || { echo "FAILED $transport/$kind: rank $r reported no error"; ok=0; }
    if ! grep -qF "$odd" <<< "$line" || ! grep -qF "$even" <<< "$line" || ! grep -q "#6" <<< "$line"; then
      echo "FAILED $transport/$kind: rank $r's error does not show both calls:"; echo "  $line"; ok=0
    fi
  done
  if [ $ok -eq 1 ]; then echo "ok: $transport/$kind"; else fail=1; echo "--- output:"; cat "$out"; fi
}

# The four transports at once: over TCP a rank that caught a mismatch its
# peers cannot see waits kolo's verdict time (5 s) before it fails, so the
# runs mostly wait. Each transport's lines are printed in order afterwards.
for t in shm tcp hier-aab hier-abb; do
  (
  check $t op "broadcast(f32, 1000, root=0)" "allreduce(f32, 1000, sum)"
  check $t dtype "allreduce(f64, 1000, sum)" "allreduce(f32, 1000, sum)"
  check $t count "allreduce(f32, 999, sum)" "allreduce(f32, 1000, sum)"
  check $t root "broadcast(f32, 1000, root=1)" "broadcast(f32, 1000, root=0)"
  check $t reduction "allreduce(f32, 1000, max)" "allreduce(f32, 1000, sum)"
  check $t vector "broadcast(f32, 999, root=0)" "broadcast(f32, 1000, root=0)"
  check $t shape "allreduce(f32, 1000, sum, shape hash $(shape_hash 10 100))" \
    "allreduce(f32, 1000, sum, shape hash $(shape_hash 1000))"
  check $t alltoallv "rank 2 sends 3 elements to rank 1" "but rank 1 expects 4 from rank 2"
  check $t alltoallv_call "alltoall(f32, 3)" "alltoallv(f32)"
  ) > "$dir/$t.log" 2>&1 &
done
wait
for t in shm tcp hier-aab hier-abb; do
  cat "$dir/$t.log"
  grep -q "^FAILED" "$dir/$t.log" && fail=1
done
# After a mismatch that every rank caught at the fingerprint check (one host;
# two ranks over TCP) the communicator remains usable; where a rank may see
# only its neighbour fail (a TCP ring of three, the hierarchy) it must be
# unusable and kolo::init() form a new one. Either way correct collectives follow.
recover() {  # transport np expected ("recovered" or "recovered|reformed") [mode]
  local transport=$1 np=$2 want=$3 mode=${4:-recover} kolo_transport=$1 wrap=()
  case $transport in
    hier-*) kolo_transport=auto wrap=("$(dirname "$0")/as_host.sh" "$(sed 's/hier-//; s/./& /g' <<< "$transport")") ;;
  esac
  KOLO_TRANSPORT=$kolo_transport timeout 300 "$KOLORUN" -np "$np" "${wrap[@]}" "$BIN" "$mode" > "$out" 2>&1
  local rc=$? ok=1
  [ $rc -eq 0 ] || { echo "FAILED recover $transport np$np: kolorun exited $rc"; ok=0; }
  for ((r = 0; r < np; r++)); do
    grep -Eq "^\[$r\] ($want)$" "$out" || { echo "FAILED recover $transport np$np: rank $r did not print $want"; ok=0; }
    # its own error, or (a rank that saw a peer fail) what the peers reported
    grep -q "^\[$r\] mismatch: kolo rank $r: " "$out" && grep -Eq "^\[$r\] .*mismatched (collectives|alltoallv counts) at collective #2" "$out" ||
      { echo "FAILED $mode $transport np$np: rank $r did not catch the mismatch"; ok=0; }
  done
  if [ $ok -eq 1 ]; then echo "ok: $mode $transport np$np"; else fail=1; echo "--- output:"; cat "$out"; fi
}
recover shm 2 recovered
recover shm 3 recovered
recover tcp 2 recovered
recover tcp 3 "recovered|reformed"
recover hier-aab 3 "recovered|reformed"
# Every rank sees every rank's alltoallv counts, so every rank rejects a
# disagreement and the communicator remains usable on every transport.
recover shm 3 recovered recover-alltoallv
recover tcp 3 recovered recover-alltoallv
recover hier-aab 3 recovered recover-alltoallv

exit $fail
