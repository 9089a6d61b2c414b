#!/usr/bin/env bash
# Failures of a kolorun -H job on emulated hosts (hosts.sh): 5 ranks on h0:2, h1:2, h2:1 run
# kolo_fault_rank (an allreduce loop, results checked; survivors ignore kolorun's SIGTERM so
# that kolo itself must report the loss, see tests/failures/fault_rank.cc). One case per run:
#   kolorun_failure_test.sh kill-host   every process of h1 (its agent and ranks) SIGKILLed
#   kolorun_failure_test.sh link-down   h1's link pulled mid-collective (its processes live on)
#   kolorun_failure_test.sh kill-agent  only h1's agent SIGKILLed (its ranks die with it)
# Checks: every survivor (ranks 0, 1, 4) reports a kolo error naming a lost rank (2 or 3) and
# host h1 within KOLO_PEER_TIMEOUT_MS + DETECT_SLACK_S of the failure; kolorun exits non-zero
# naming h1; then no process of the job and no /dev/shm segment is left on any host (for
# link-down: h1's agent ends its ranks itself once the launcher has been silent for long).
# Needs root (skips with 77 otherwise) and KOLO_TEST_BUILD_DIR (set by ctest).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
case=${1:?usage: kolorun_failure_test.sh kill-host|link-down|kill-agent}
B=${KOLO_TEST_BUILD_DIR:-$REPO/build}
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
K=$B/tools/kolorun/kolorun
F=$B/tests/failures/kolo_fault_rank
for f in "$K" "$F"; do [ -x "$f" ] || { echo "FAIL: no $f"; exit 1; }; done
PEER_MS=${KOLO_PEER_TIMEOUT_MS:-3000}
DETECT_SLACK_S=${DETECT_SLACK_S:-5}

source "$HERE/hosts.sh"
WORK=$(mktemp -d /tmp/kolorun-failure-test.XXXXXX)
kh_on_down "rm -rf '$WORK'"
kh_up 3 || exit 1
cd "$WORK"

source "$HERE/checks.sh"

export KOLO_PEER_TIMEOUT_MS=$PEER_MS
# The grace period is long: kolo, not kolorun's SIGKILL, must end the survivors.
kh_exec h0 "$K" -H h0:2,h1:2,h2:1 --rsh "ssh -F $KH_SSH_CONFIG" --grace-period 30 \
  -x KOLO_PEER_TIMEOUT_MS "$F" "$WORK" --max-s 120 > out 2> err &
job=$!
for i in $(seq 600); do [ "$(ls | grep -c '^running\.[0-9]*$')" = 5 ] && break; sleep 0.1; done
expect "all 5 ranks inside the loop" eq "$(ls | grep -c '^running\.[0-9]*$')" 5

t0=$(date +%s.%N)
case $case in
kill-host) kh_kill h1 ;;
link-down) kh_link h1 down ;;
kill-agent)
  agent=$(ps -o ppid= -p "$(cat rank.2.pid)" | tr -d ' ')
  expect "rank 2's parent is the agent" eq "$(tr '\0' ' ' < /proc/$agent/cmdline)" "$K --kolorun-agent "
  kill -9 "$agent"
  ;;
*) echo "unknown case $case"; exit 2 ;;
esac

# kolorun must end: the survivors' kolo errors end them (exit 3), or kolorun stops them.
end_bound=$((PEER_MS / 1000 + 60))
for ((i = 0; i < end_bound * 10; i++)); do kill -0 $job 2>/dev/null || break; sleep 0.1; done
if kill -0 $job 2>/dev/null; then
  fail "kolorun still running $end_bound s after the failure"
  pkill -KILL -P $job; kill -9 $job
fi
wait $job
rc=$?
t1=$(date +%s.%N)
echo "kolorun exited $rc, $(awk -v a="$t1" -v b="$t0" 'BEGIN { printf "%.1f", a - b }') s after the failure"
expect "kolorun exits non-zero" eq "$([ $rc -ne 0 ] && echo yes)" yes
expect "kolorun names host h1 and its ranks" has err "^kolorun: (lost host h1 \(ranks 2, 3\)|rank [23] on h1 )"

bound=$(awk -v p="$PEER_MS" -v s="$DETECT_SLACK_S" 'BEGIN { print p / 1000 + s }')
for r in 0 1 4; do
  lines=$(cat out err | grep "^\[$r\] " | sed "s/^\[$r\] //")
  echo "$lines" > "survivor.$r"
  expect "survivor $r caught a kolo error" has "survivor.$r" "^caught: kolo rank $r: "
  expect "survivor $r names a lost rank of h1" has "survivor.$r" "rank [23][^0-9]"
  expect "survivor $r names host h1" has "survivor.$r" "h1"
  at=$(grep -m1 '^error-at ' "survivor.$r" | awk '{print $2}')
  if [ -n "$at" ]; then
    d=$(awk -v a="$at" -v b="$t0" 'BEGIN { printf "%.2f", a - b }')
    expect "survivor $r failed within $bound s ($d s)" within "$at" "$t0" "$bound"
  else
    fail "survivor $r wrote no error-at"
  fi
done

# h1's agent, cut off by the link, ends its ranks once the launcher has been silent past
# kolorun's host timeout (KOLO_PEER_TIMEOUT_MS + 5 s) + 2 s.
for h in h0 h2 h1; do
  expect "nothing of the job left on $h" clean_within "$h" $((PEER_MS / 1000 + 20))
done
[ "$case" = link-down ] && kh_link h1 up
[ "$fails" = 0 ] && echo "kolorun_failure_test $case: all passed" || echo "kolorun_failure_test $case: $fails failed"
exit $((fails > 0))
