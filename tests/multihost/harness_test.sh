#!/usr/bin/env bash
# Self-test of the emulated-hosts harness (hosts.sh): 3 hosts with distinct hostnames and
# /dev/shm, private /etc/hosts, ssh between them, ping, link down/up, shaping, decoy bridge,
# kh_kill; then teardown leaves no namespace, holder, sshd or state directory, also when the
# test itself is SIGKILLed (the watchdog).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/hosts.sh"
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }

fails=0
idfile=$(mktemp /tmp/harness-test-id.XXXXXX)
check() {  # check "what" CMD...: run CMD, count a failure with its output
  local what=$1 out; shift
  if out=$("$@" 2>&1); then echo "ok   $what"; else echo "FAIL $what: $out"; fails=$((fails + 1)); fi
}
eq() { [ "$1" = "$2" ] || { echo "expected '$2', got '$1'"; return 1; }; }

# Runs in a subshell so that its EXIT trap (kh_down) fires before the leftover checks below.
flag=$(mktemp -u /tmp/harness-test-flag.XXXXXX)
(
  kh_on_down "touch '$flag'"                   # registered before kh_up: must still run
  kh_up 3 || exit 1
  echo "$KH_ID" > "$idfile"
  check "hostnames" eq "$(for h in h0 h1 h2; do kh_exec $h hostname; done | tr '\n' ' ')" "h0 h1 h2 "
  check "own /dev/shm" eq "$(kh_exec h0 touch /dev/shm/kh-probe; kh_exec h1 ls /dev/shm; ls /dev/shm/kh-probe 2>/dev/null)" ""
  check "/dev/shm on h0" eq "$(kh_exec h0 ls /dev/shm)" "kh-probe"
  check "names resolve on h2" eq "$(kh_exec h2 getent hosts h0 | awk '{print $1}')" "$(kh_addr h0)"
  check "own hostname resolves to eth0" eq "$(kh_exec h1 getent hosts h1 | awk '{print $1}')" "$(kh_addr h1)"
  check "/sys/class/net shows the host's own links" eq "$(kh_exec h1 ls /sys/class/net | tr '\n' ' ')" "eth0 lo "
  check "same cwd inside" eq "$(kh_exec h1 pwd)" "$PWD"
  check "ssh h0 -> h2" eq "$(kh_exec h0 ssh -F "$KH_SSH_CONFIG" h2 'hostname; ls /dev/shm | wc -l')" "h2
0"
  check "ssh h2 -> h1 by address" eq "$(kh_exec h2 ssh -F "$KH_SSH_CONFIG" "$(kh_addr h1)" hostname)" "h1"
  check "kh_ssh h0" eq "$(kh_ssh h0 hostname)" "h0"
  check "ping h1 -> h2" kh_exec h1 ping -c 1 -W 2 h2
  check "root namespace cannot reach hosts" eq "$(ping -c 1 -W 1 "$(kh_addr h0)" >/dev/null 2>&1; echo $?)" "1"
  kh_link h2 down
  check "link down: no ping" eq "$(kh_exec h1 ping -c 1 -W 1 h2 >/dev/null 2>&1; echo $?)" "1"
  kh_link h2 up
  check "link up again: ping" kh_exec h1 ping -c 1 -W 2 h2
  check "shape h1" kh_shape h1 2gbit
  check "tbf on h1" eval "kh_tc $(kh_ns h1) qdisc show dev eth0 | grep -q 'tbf.*rate 2Gbit'"
  check "unshape h1" kh_unshape h1
  check "decoy bridge on h0, h1" eval "kh_decoy h0 && kh_decoy h1"
  check "decoy address is local on h1" eval "kh_exec h1 ip -4 -br addr show docker0 | grep -q 172.17.0.1/16"
  kh_exec h1 sleep 300 & bg=$!
  sleep 0.3
  kh_kill h1; wait "$bg"; st=$?
  check "kh_kill ends what was started on h1" eq "$st" 137
  check "kh_kill keeps sshd on h1" eq "$(kh_exec h0 ssh -F "$KH_SSH_CONFIG" h1 hostname)" "h1"
  exit "$fails"
)
fails=$?
id=$(cat "$idfile" 2>/dev/null); rm -f "$idfile"
if [ -z "$id" ]; then echo "FAIL kh_up"; exit 1; fi
check "no namespace left" eq "$(ip netns list | grep -c "^kh-$id-")" "0"
check "no state dir left" eq "$(ls -d /tmp/kh-"$id" 2>/dev/null)" ""
check "kh_on_down commands ran" eq "$(ls "$flag" 2>/dev/null)" "$flag"
rm -f "$flag"
check "no sshd/holder left" eq "$(pgrep -f "kh-$id" || true)" ""
# A test killed by SIGKILL (ctest's timeout) runs no trap: the watchdog tears its hosts down.
bash -c 'source "$1"; kh_up 1 || exit 1; echo "$KH_ID" > "$2"; exec sleep 300' _ "$HERE/hosts.sh" "$idfile" &
victim=$!
for _ in $(seq 1 100); do [ -s "$idfile" ] && break; sleep 0.1; done
id=$(cat "$idfile" 2>/dev/null); rm -f "$idfile"
check "second run up" eq "$(ip netns list | grep -c "^kh-$id-" || true)" "2"
kill -KILL "$victim"; wait "$victim" 2>/dev/null
for _ in $(seq 1 50); do [ "$(ip netns list | grep -c "^kh-$id-")" = 0 ] && break; sleep 0.1; done
check "watchdog removes the hosts of a SIGKILLed run" eq "$(ip netns list | grep -c "^kh-$id-"; ls -d /tmp/kh-"$id" 2>/dev/null)" "0"
check "no holder or sshd of it left" eq "$(pgrep -f "kh-$id" || true)" ""
[ "$fails" = 0 ] && echo "harness_test: all passed" || echo "harness_test: $fails failed"
exit $((fails > 0))
