#!/usr/bin/env bash
# kolo's collectives on emulated hosts (hosts.sh: own hostname, /dev/shm and network per host,
# one boot id), started with kolorun -H from h0; one case per run:
#   collectives_test.sh 2x2 [hier|flat]   2 hosts x 2 ranks: every collective x dtype x op x size
#   collectives_test.sh 221 [hier|flat]   3 hosts x 2, 2, 1 ranks   (0, 1, 7, 1001, 70001 and
#                                         >= 64 MiB), byte-exact against the reference, with the
#                                         transport checked (hier, or tcp for KOLO_HIERARCHICAL=0)
#   collectives_test.sh torchrun          2x2 started by hand inside each host with torchrun-style
#                                         variables (no kolorun): the hosts are told apart by
#                                         their /dev/shm, and every rank reports local 0/1 of 2;
#                                         then h0's ranks reach the store over 127.0.0.1 and
#                                         still advertise eth0 (routed toward an h1 rank)
#   collectives_test.sh nic               a decoy docker0 172.17.0.1/16 on every host: each rank
#                                         advertises its eth0 address (logged at info) and the
#                                         job works; --network-interface nosuch0 is an error
#                                         listing the interfaces; --network-interface docker0
#                                         (an address every host has) fails naming the address
#                                         within the rendezvous timeout, never a hang
#   collectives_test.sh kill              every process of h1 killed mid-collective: h0's ranks
#                                         fail within KOLO_PEER_TIMEOUT_MS + a few s, naming a
#                                         lost rank and host h1
#   collectives_test.sh link              h1's link down mid-collective: the same
# Needs root (skips with 77 otherwise) and KOLO_TEST_BUILD_DIR (set by ctest).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
case=${1:?usage: collectives_test.sh 2x2|221|torchrun|nic|kill|link [hier|flat]}
mode=${2:-hier}
B=${KOLO_TEST_BUILD_DIR:-$REPO/build}
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
K=$B/tools/kolorun/kolorun
CHECK=$B/tests/collectives/check_collectives
IDENT=$B/tests/collectives/kolo_identity
FAULT=$B/tests/failures/kolo_fault_rank
for f in "$K" "$CHECK" "$IDENT" "$FAULT"; do [ -x "$f" ] || { echo "FAIL: no $f"; exit 1; }; done

source "$HERE/hosts.sh"
source "$HERE/../common/ports.sh"
nhosts=2
[ "$case" = 221 ] && nhosts=3
kh_up $nhosts || exit 1
WORK=$(mktemp -d /tmp/kolo-coll-hosts.XXXXXX)
kh_on_down "rm -rf '$WORK'"  # after kh_up, which starts a fresh list
RSH="ssh -F $KH_SSH_CONFIG"
cd "$WORK"

fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
ok() { echo "ok   $*"; }
expect() {  # expect "what" COND...
  local what=$1; shift
  if "$@"; then ok "$what"; else fail "$what"; fi
}
has() { grep -qE -- "$2" "$1" || { echo "  /$2/ not in $1:"; sed 's/^/    /' "$1" | tail -30; return 1; }; }
eq() { [ "$1" = "$2" ] || { echo "  expected '$2', got '$1'"; return 1; }; }
now() { date +%s.%N; }
within() { awk -v a="$1" -v b="$2" -v c="$3" 'BEGIN { exit !(a - b <= c) }'; }

# kolorun on h0 for the hosts given, with the environment variables forwarded (-x).
krun() {
  local hosts=$1; shift
  kh_exec h0 "$K" -H "$hosts" --rsh "$RSH" --timeout 900 "$@"
}

case $case in
2x2 | 221)
  hosts=h0:2,h1:2
  [ "$case" = 221 ] && hosts=h0:2,h1:2,h2:1
  hier=1 transport=hier
  [ "$mode" = flat ] && hier=0 transport=tcp
  krun "$hosts" -x KOLO_HIERARCHICAL=$hier "$CHECK" --large --expect-transport $transport > out 2> err
  rc=$?
  expect "$case $mode: kolorun exits 0" eq "$rc" 0
  expect "$case $mode: every check passed on $transport" has out "^\[0\] collectives: [0-9]+ passed, 0 failed \([0-9] ranks, transport $transport\)"
  [ "$rc" = 0 ] || { grep FAILED out err | head -20; tail -20 err; }
  ;;

torchrun)
  # Ranks 0, 1 on h0 and 2, 3 on h1, rank 0 hosting the store on h0's address. LOCAL_RANK is
  # deliberately left out: kolo decides who shares a host itself.
  addr=$(kh_addr h0) port=$(test_port)
  pids=()
  for r in 0 1 2 3; do
    h=h$((r / 2))
    kh_exec $h env RANK=$r WORLD_SIZE=4 MASTER_ADDR=$addr MASTER_PORT=$port KOLO_SECRET=coll-test-secret-0123 \
      timeout -s KILL 120 "$IDENT" > out.$r 2>&1 &
    pids+=($!)
  done
  for r in 0 1 2 3; do
    wait "${pids[$r]}"
    expect "torchrun-style rank $r exits 0" eq "$?" 0
    expect "torchrun-style rank $r: local $((r % 2)) of 2, hierarchical, sum 10" \
      eq "$(cat out.$r)" "identity rank=$r size=4 local_rank=$((r % 2)) local_size=2 transport=hier sum=10"
  done

  # h0's ranks reach the store over loopback (MASTER_ADDR=127.0.0.1), h1's over the network:
  # h0's ranks must not advertise 127.0.0.1 but the address h1 reaches them on.
  port=$(test_port)
  pids=()
  for r in 0 1 2 3; do
    h=h$((r / 2)) master=$addr
    [ $r -lt 2 ] && master=127.0.0.1
    kh_exec $h env RANK=$r WORLD_SIZE=4 MASTER_ADDR=$master MASTER_PORT=$port KOLO_SECRET=coll-test-secret-0123 \
      KOLO_LOG=info timeout -s KILL 120 "$IDENT" > out.$r 2> err.$r &
    pids+=($!)
  done
  for r in 0 1 2 3; do
    wait "${pids[$r]}"
    expect "store on loopback for h0: rank $r exits 0 with sum 10" has out.$r "^identity rank=$r size=4 .*transport=hier sum=10$"
  done
  for r in 0 1; do
    expect "store on loopback for h0: rank $r advertises $addr, routed toward h1" \
      has err.$r "advertising ${addr//./\\.} \(interface eth0, the route to rank [23] at "
  done
  ;;

nic)
  for h in h0 h1; do kh_decoy $h; done
  krun h0:2,h1:2 -x KOLO_LOG=info "$IDENT" > out 2> err
  expect "decoy docker0 on every host: exits 0" eq "$?" 0
  for r in 0 1 2 3; do
    a=$(kh_addr h$((r / 2)))
    expect "decoy: rank $r advertises its eth0 address $a" \
      has err "^\[$r\] kolo rank $r: info: data connections: advertising ${a//./\\.} \(interface eth0, the route to the rendezvous store\)"
    expect "decoy: rank $r's sum" has out "^\[$r\] identity rank=$r size=4 .* transport=hier sum=10$"
  done

  # kolorun checks --network-interface itself (it also picks its store's address with it);
  # the ranks' own check is KOLO_IFACE.
  krun h0:2,h1:2 --network-interface nosuch0 "$IDENT" > out 2> err
  expect "--network-interface nosuch0: exits non-zero" test $? -ne 0
  expect "--network-interface nosuch0: kolorun names it" has err "nosuch0"
  krun h0:2,h1:2 -x KOLO_IFACE=nosuch0 "$IDENT" > out 2> err
  expect "KOLO_IFACE=nosuch0: exits non-zero" test $? -ne 0
  expect "KOLO_IFACE=nosuch0: the rank's error names it, its host, and lists the interfaces" \
    has err "kolo rank [0-3]: KOLO_IFACE=nosuch0: host h[01] has no interface of that name with an IPv4 address; its interfaces: lo 127\.0\.0\.1, eth0 [0-9.]+, docker0 172\.17\.0\.1"

  # The classic hang: every rank advertises 172.17.0.1, which each host has. It must end
  # in an error naming that address, within the rendezvous timeout.
  t0=$(now)
  krun h0:2,h1:2 -x KOLO_IFACE=docker0 -x KOLO_RENDEZVOUS_TIMEOUT_MS=8000 "$IDENT" > out 2> err
  rc=$? t1=$(now)
  expect "KOLO_IFACE=docker0 (on every host): exits non-zero" test $rc -ne 0
  expect "KOLO_IFACE=docker0: an error naming the address 172.17.0.1" \
    has err "kolo rank [0-9]: .*(advertised, 172\.17\.0\.1:[0-9]+|data address 172\.17\.0\.1:[0-9]+ of rank [0-9] \(host h[01]\) is not that rank)"
  expect "KOLO_IFACE=docker0: over within the timeout (8 s) + 20 s" within "$t1" "$t0" 28
  ;;

kill | link)
  # 2 hosts x 2 ranks started inside each host with torchrun-style variables (no launcher to
  # tear anything down: what each rank reports is kolo's own detection). kolo_fault_rank
  # loops over allreduces of mixed sizes until kolo reports an error; 256 KiB segments make
  # its larger allreduces pipelined (rings on a thread of their own).
  peer_ms=3000
  addr=$(kh_addr h0) port=$(test_port)
  pids=()
  for r in 0 1 2 3; do
    kh_exec h$((r / 2)) env RANK=$r WORLD_SIZE=4 MASTER_ADDR=$addr MASTER_PORT=$port \
      KOLO_SECRET=coll-test-secret-0123 KOLO_PEER_TIMEOUT_MS=$peer_ms KOLO_HIER_SEGMENT=262144 \
      timeout -s KILL 120 "$FAULT" "$WORK" --max-s 100 > out.$r 2>&1 &
    pids+=($!)
  done
  for ((i = 0; i < 600; i++)); do [ "$(ls "$WORK" | grep -c '^running\.')" -ge 4 ] && break; sleep 0.1; done
  expect "$case: every rank in its loop" eq "$(ls "$WORK" | grep -c '^running\.')" 4
  sleep 0.$((RANDOM % 10))
  t_death=$(now)
  if [ "$case" = kill ]; then kh_kill h1; else kh_link h1 down; fi
  survivors="0 1"
  [ "$case" = link ] && survivors="0 1 2 3"  # h1's ranks live on, cut off: they must fail too
  for r in $survivors; do
    wait "${pids[$r]}"
    rc=$? t_exit=$(now)
    lost="rank [23] \(host h1\)"
    [ $r -ge 2 ] && lost="rank [01] \(host h0\)"
    expect "$case: rank $r exits 3 (kolo's error)" eq "$rc" 3
    expect "$case: rank $r caught a kolo error" grep -q "^caught: kolo rank $r: " out.$r
    expect "$case: rank $r names a lost rank and its host" grep -Eq "$lost" out.$r
    at=$(grep -m1 "^error-at " out.$r | awk '{print $2}')
    expect "$case: rank $r's error within KOLO_PEER_TIMEOUT_MS + 5 s" within "${at:-1e12}" "$t_death" $((peer_ms / 1000 + 5))
    # Rank 0 hosts the store: at exit it must not wait out KOLO_STORE_LINGER_MS
    # for peers cut off behind the link (the store probes them too).
    expect "$case: rank $r exits within 2 x KOLO_PEER_TIMEOUT_MS + 10 s" within "$t_exit" "$t_death" $((2 * peer_ms / 1000 + 10))
    [ $fails -eq 0 ] || sed "s/^/    [$r] /" out.$r | head -20
  done
  [ "$case" = link ] && kh_link h1 up
  ;;
*)
  echo "unknown case $case"; exit 2 ;;
esac

[ $fails -eq 0 ] && echo "PASS collectives_test $case $mode" || echo "FAILED collectives_test $case $mode: $fails"
exit $((fails > 0))
