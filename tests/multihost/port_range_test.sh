#!/usr/bin/env bash
# KOLO_PORT_RANGE holds for `kolorun -H` across emulated hosts h0, h1, h2 (hosts.sh) whose
# firewalls admit new TCP connections only to the range and to ssh's port 22 (kolorun reaches its
# agents over ssh), as a cluster's firewall would; tests/trainers/test_port_range.py does the same
# for the Python fronts on one host. Each host's nftables rule drops a new connection to any other
# port and records the port in a set, so that a failure names it. KOLO_PORT_RANGE is set only in
# kolorun's environment: kolorun forwards it to every host with the job.
#   1. the firewall works: from h1, a port of h0 inside the range is reached, one outside is not
#      (and its port is recorded), so the checks below can fail;
#   2. kolo-bench (every collective, results verified) on -H h0:2,h1:2 with KOLO_HIERARCHICAL=1
#      and 0: kolorun's store and the ranks' connections;
#   3. torchrun's variables, launched on h0 and on h2 (a host without ranks: h0's agent then
#      comes over ssh with a fresh login's environment): MASTER_PORT, which the agent on rank 0's
#      host (h0) chooses, is in the range and the same on every rank; then the "kolo" backend
#      through env:// (torch's TCPStore on MASTER_PORT on h0, reached from h1) passes (skipped
#      without Debian's torch).
# After every job no host's firewall has dropped a connection attempt. A connection to a port
# outside the range hangs: every run is bounded by `timeout`, and a failed run names the ports the
# firewalls dropped. Needs root and nft (skips with 77 otherwise) and KOLO_TEST_BUILD_DIR (by ctest).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
B=${KOLO_TEST_BUILD_DIR:-$REPO/build}
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
command -v nft > /dev/null || { echo "SKIP: needs nft (Debian's nftables)"; exit 77; }
K=$B/tools/kolorun/kolorun
R=$B/tests/launcher/kolo_test_rank
BENCH=$B/tools/kolo-bench/kolo-bench
for f in "$K" "$R" "$BENCH"; do [ -x "$f" ] || { echo "FAIL: no $f"; exit 1; }; done

LO=24100 HI=24199
OUTSIDE=$((LO - 1))
TABLE="inet kolo_port_range_test"

source "$HERE/hosts.sh"
WORK=$(mktemp -d /tmp/kolorun-port-range-test.XXXXXX)
kh_on_down "rm -rf '$WORK'"
kh_up 3 || exit 1  # tears down on exit (trap) and if this shell is killed (watchdog)
RSH="ssh -F $KH_SSH_CONFIG"
cd "$WORK"
source "$HERE/checks.sh"

# The firewall lives in each host's network namespace and goes with it at teardown. Only SYNs are
# recorded: conntrack starts with the first table, so a late packet of a connection made before
# (kh_up's probe of sshd) counts as invalid and is dropped too, but opens nothing.
for h in "${KH_HOSTS[@]}"; do
  kh_exec "$h" nft -f - <<EOF || { echo "FAIL: nft on $h"; exit 1; }
table $TABLE {
  set dropped { type inet_service; flags dynamic; }
  chain input {
    type filter hook input priority 0; policy accept;
    ct state established,related accept
    tcp dport 22 accept
    tcp dport != $LO-$HI tcp flags & (syn | ack) == syn add @dropped { tcp dport }
    tcp dport != $LO-$HI drop
  }
}
EOF
done

# "h0: 24099; h1: 41234, 41240": the ports each host's firewall dropped since the last flush_dropped.
dropped() {
  local h ports out=""
  for h in "${KH_HOSTS[@]}"; do
    ports=$(kh_exec "$h" nft list set $TABLE dropped | tr -d '\n\t' | sed -n 's/.*elements = { *\([^}]*\)}.*/\1/p')
    ports=${ports%"${ports##*[! ]}"}
    [ -z "$ports" ] || out+="$h: $ports; "
  done
  echo "${out%; }"
}
flush_dropped() { local h; for h in "${KH_HOSTS[@]}"; do kh_exec "$h" nft flush set $TABLE dropped; done; }

# job WHAT SECS HOST KOLORUN-ARGS...: kolorun on HOST with KOLO_PORT_RANGE, killed after SECS (a
# connection the firewall drops hangs); out and err hold its output. Checks that it exits 0 and that
# no firewall dropped anything meanwhile; a failure shows the dropped ports and kolorun's stderr.
job() {
  local what=$1 secs=$2 on=$3 rc d
  shift 3
  flush_dropped
  # --foreground: kolorun alone gets the SIGTERM, once (timeout also signals its own process
  # group otherwise, and a second signal makes kolorun skip the grace period).
  KOLO_PORT_RANGE=$LO-$HI kh_exec "$on" timeout --foreground -k 10 "$secs" "$K" "$@" > out 2> err
  rc=$?
  d=$(dropped)
  if [ $rc = 124 ] || [ $rc = 137 ]; then
    fail "$what: still running after $secs s (a connection to a port outside $LO-$HI? dropped: ${d:-none})"
  else
    expect "$what: exits 0" eq "$rc" 0
  fi
  expect "$what: no connection dropped (ports outside $LO-$HI)" eq "$d" ""
  [ $rc = 0 ] || sed 's/^/    /' err | tail -20
  return 0
}

# 1. The firewall drops what it must, and says which port.
kh_exec h0 python3 -c '
import os, socket, sys, time
servers = [socket.create_server(("0.0.0.0", int(p))) for p in sys.argv[1:]]
print(os.getpid(), flush=True)
time.sleep(120)' "$LO" "$OUTSIDE" > listener 2>&1 &
for i in $(seq 100); do [ -s listener ] && break; sleep 0.1; done
reach() { kh_exec h1 timeout 3 bash -c "exec 3<>/dev/tcp/$(kh_addr h0)/$1" 2> /dev/null; }
unreachable() { ! reach "$1"; }
flush_dropped
expect "firewall: h1 reaches h0:$LO (inside the range)" reach "$LO"
expect "firewall: h1 does not reach h0:$OUTSIDE (outside the range)" unreachable "$OUTSIDE"
expect "firewall: h0's firewall names the dropped port" eq "$(dropped)" "h0: $OUTSIDE"
pid=$(head -1 listener)
[[ $pid =~ ^[0-9]+$ ]] && kill "$pid"

# 2. Collectives across the hosts, hierarchical and flat.
for hier in 1 0; do
  what="kolo-bench -H h0:2,h1:2 KOLO_HIERARCHICAL=$hier"
  job "$what" 120 h0 -H h0:2,h1:2 --rsh "$RSH" -x KOLO_HIERARCHICAL=$hier "$BENCH" -c all -d f32 \
    --sizes "8,4100,1048580" -n 2 -w 1 --time-budget 0
  expect "$what: six collectives verified" eq "$(grep -c '^\[0\] # all results correct' out)" 6
done

# 3. torchrun's variables; MASTER_PORT is chosen on h0, by a local agent or one reached over ssh.
in_range() { [[ $1 =~ ^[0-9]+$ ]] && [ "$1" -ge $LO ] && [ "$1" -le $HI ]; }
# The MASTER_PORT every rank saw, when they agree.
one_port() { grep -oE '^\[[0-3]\] MASTER_PORT=[0-9]+$' out | cut -d= -f2 | sort -u | tr '\n' ' ' | sed 's/ $//'; }
PGW=$REPO/tests/python/workers/process_group_worker.py
torch=0
/usr/bin/python3 -c "import torch" 2> /dev/null && [ -d "$B/python/kolo" ] && torch=1
for launcher in h0 h2; do
  what="torchrun's variables, launched on $launcher"
  job "$what" 60 $launcher -H h0:2,h1:2 --rsh "$RSH" "$R" where MASTER_PORT
  port=$(one_port)
  expect "$what: one MASTER_PORT on 4 ranks, in $LO-$HI (got '$port')" in_range "$port"
  expect "$what: every rank has it" eq "$(grep -cE "^\[[0-3]\] MASTER_PORT=$port$" out)" 4

  what="the kolo backend through env://, launched on $launcher"
  if [ $torch = 0 ]; then
    echo "skip $what: no Debian torch or no kolo Python module in $B/python"
    continue
  fi
  job "$what" 240 $launcher -H h0:2,h1:2 --rsh "$RSH" -x PYTHONPATH="$B/python" -x OMP_NUM_THREADS=1 \
    sh -c 'echo "MASTER_PORT=$MASTER_PORT"; exec "$@"' sh /usr/bin/python3 "$PGW" init
  port=$(one_port)
  expect "$what: MASTER_PORT in $LO-$HI (got '$port')" in_range "$port"
  for r in 0 1 2 3; do
    expect "$what: rank $r on h$((r / 2)) joined through MASTER_ADDR" has_text out \
      "[$r] process_group init: rank $r of 4 via MASTER_ADDR"
    expect "$what: rank $r's allreduce right" has_text out "[$r] process_group rank $r of 4 [init]: OK"
  done
done

for h in "${KH_HOSTS[@]}"; do expect "nothing of the jobs left on $h" clean_within "$h" 10; done
[ "$fails" = 0 ] && echo "port_range_test: all passed" || echo "port_range_test: $fails failed"
exit $((fails > 0))
