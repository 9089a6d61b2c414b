#!/usr/bin/env bash
# Intruders against a real 3-rank job over TCP. While the job waits for its
# last rank, kolo_poke knocks on the store and on the waiting ranks' data
# listeners (garbage, a wrong MAC, a bogus identity, a 2^40 length prefix
# before and after authentication, silent connections), and a stale rank
# with an old secret tries to join. Then the last rank comes and the job must
# complete with the right sums; the knocks must be logged as rejected, naming
# the peer address, and the stale rank must fail with the clear error.
#   job_test.sh torchrun SECURE_RANK KOLO_POKE          (rank 0 hosts the store)
#   job_test.sh kolorun  SECURE_RANK KOLO_POKE KOLORUN  (kolorun hosts the store)
set -u
source "$(dirname "$0")/../common/ports.sh"
MODE=$1
RANK_BIN=$2
POKE=$3
KOLORUN=${4:-}
N=3
LAST=$((N - 1))
fail=0
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT

ok() { echo "ok: $1"; }
bad() { echo "FAILED: $1"; fail=1; }
random_hex() { od -An -N16 -tx1 /dev/urandom | tr -d ' \n'; }

export KOLO_TRANSPORT=tcp KOLO_RENDEZVOUS_TIMEOUT_MS=60000
export SECURE_GO_FILE=$tmp/go SECURE_WAIT_RANK=$LAST
unset KOLO_SECRET KOLO_RANK KOLO_SIZE RANK WORLD_SIZE KOLO_STORE_ADDR

if [ "$MODE" = torchrun ]; then
  secret=$(random_hex)
  port=$(test_port)
  store=127.0.0.1:$port
  for ((r = 0; r < N; r++)); do
    RANK=$r WORLD_SIZE=$N LOCAL_RANK=$r LOCAL_WORLD_SIZE=$N MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      KOLO_SECRET=$secret "$RANK_BIN" > "$tmp/out.$r" 2> "$tmp/err.$r" &
    pids+=($!)
  done
  stale=(RANK=1 WORLD_SIZE=$N LOCAL_RANK=1 LOCAL_WORLD_SIZE=$N MASTER_ADDR=127.0.0.1 MASTER_PORT=$port)
  store_log=$tmp/err.0
else
  SECURE_INFO_FILE=$tmp/info "$KOLORUN" -np $N --timeout 300 "$RANK_BIN" > "$tmp/out.job" 2> "$tmp/err.job" &
  pids+=($!)
  for ((i = 0; i < 600; i++)); do [ -s "$tmp/info" ] && break; sleep 0.1; done
  read -r store secret < "$tmp/info" || { bad "rank 0 did not write $tmp/info"; cat "$tmp/err.job"; exit 1; }
  stale=(KOLO_RANK=1 KOLO_SIZE=$N KOLO_LOCAL_RANK=1 KOLO_LOCAL_SIZE=$N KOLO_STORE_ADDR=$store KOLO_JOB_ID=stale)
  store_log=$tmp/err.job
fi

# The knocks, while ranks 0..N-2 wait for rank N-1.
"$POKE" "$store" "$secret" $N $LAST > "$tmp/poke" 2>&1
poke_rc=$?
sed 's/^/  poke: /' "$tmp/poke"
[ $poke_rc = 0 ] && ok "every knock on the store and the data listeners was turned away" ||
  bad "kolo_poke (exit $poke_rc)"

# A stale rank: same store address, an old secret.
env "${stale[@]}" KOLO_SECRET="$(random_hex)" SECURE_INFO_FILE= "$RANK_BIN" > "$tmp/stale.out" 2> "$tmp/stale.err"
stale_rc=$?
want="rendezvous: the store at $store rejected this rank's credentials (different job or KOLO_SECRET?)"
if [ $stale_rc = 1 ] && grep -qF "$want" "$tmp/stale.err"; then
  ok "a stale rank with an old secret is refused: $(grep -F "$want" "$tmp/stale.err")"
else
  bad "stale rank: exit $stale_rc, wanted 1 and '$want'"; cat "$tmp/stale.err"
fi

# The last rank comes; the job must complete undisturbed.
touch "$tmp/go"
rcs=()
for p in "${pids[@]}"; do wait "$p"; rcs+=($?); done
pids=()
cat "$tmp"/out.* > "$tmp/out"
cat "$tmp"/err.* > "$tmp/err"
job_ok=1
for rc in "${rcs[@]}"; do [ "$rc" = 0 ] || job_ok=0; done
if [ $job_ok = 1 ]; then
  ok "the job exited 0 (${rcs[*]})"
else
  bad "job exit codes: ${rcs[*]}"; sed 's/^/  err: /' "$tmp/err"
fi
for ((r = 0; r < N; r++)); do
  grep -q "secure_rank $r ok transport=tcp sum=$((N * (N + 1) / 2))" "$tmp/out" ||
    { bad "rank $r did not finish with the right sums"; cat "$tmp/out"; }
done

# The log names every rejected peer.
stores=$(grep -c "rendezvous store: rejected a connection from 127.0.0.1:" "$store_log")
# garbage, wrong MAC, 2^40 before auth, 2^40 after auth (a bad message), the stale rank
if [ "$stores" -ge 4 ] && grep -q "rendezvous store: closing connection from 127.0.0.1:[0-9]*: bad message (length prefix" "$store_log"; then
  ok "the store logged $stores rejected connections and the oversize message, with their addresses"
else
  bad "store log: $stores rejections"; sed 's/^/  log: /' "$store_log"
fi
data=$(grep -c "rejected a data connection from 127.0.0.1:" "$tmp/err")
wrong=$(grep -c "rejected a data connection from 127.0.0.1:[0-9]*: wrong credentials (not this job's secret)" "$tmp/err")
# per waiting rank: garbage, wrong MAC, bogus identity, 2^40 prefix
if [ "$data" -ge $((4 * LAST)) ] && [ "$wrong" -ge "$LAST" ]; then
  ok "the ranks logged $data rejected data connections ($wrong with a wrong MAC), with their addresses"
else
  bad "data connection log: $data rejections, $wrong wrong MACs"; sed 's/^/  log: /' "$tmp/err"
fi
exit $fail
