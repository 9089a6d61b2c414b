#!/usr/bin/env bash
# An elastic kolorun job on 3 emulated hosts x 2 workers (tests/multihost/hosts.sh) under
#   kolorun --min-np 2 --host-discovery-script (a file the test edits), started on h0,
# running PROGRAM (default worker):
#   worker  kolo_elastic_worker (C++: exact allreduce sums, a committed step counter,
#           re-formation with kolo::init()); the test stops it with a file
#   train   examples/python/elastic_fashion_mnist.py (hvd.elastic on the main job's model,
#           Debian's torch; TRAIN_ARGS); it ends after its epoch, and its test accuracy
#           must reach MIN_ACCURACY (default 70 %)
# Each injection (INJECTIONS, default 1) takes h2 away and brings it back:
#   kill-host  every process of h2 SIGKILLed (kh_kill)
#   link-down  h2's link pulled (its processes live on until their agent, cut off
#              from kolorun, ends them); the link comes back before h2 is listed again
# then h2 is dropped from the list for a discovery run and listed again.
# Checks: the survivors (4 workers on h0, h1) re-form without h2 and go on; h2's new
# workers join and the 6 go on; kolorun exits 0 when the test stops the job; every sum
# exact; rank 0's steps each exactly once (the step counter proves no committed step was
# lost or run twice); nothing of the job left on any host. Prints each injection's
# recovery time (loss -> first step of the re-formed job) and return time (h2 listed
# again -> first step with its new workers), and checks recovery <= BOUND_S and return
# <= RETURN_BOUND_S: deadlines of 60 s by default (a test never asserts speed on a loaded
# machine); the measurement (bench/results/elastic-*) passes the issue's BOUND_S=10.
# Needs root (skips with 77 otherwise) and KOLO_TEST_BUILD_DIR (set by ctest).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
case=${1:?usage: elastic_hosts_test.sh kill-host|link-down}
B=${KOLO_TEST_BUILD_DIR:-$REPO/build}
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
K=$B/tools/kolorun/kolorun
W=$B/tests/elastic/kolo_elastic_worker
for f in "$K" "$W"; do [ -x "$f" ] || { echo "FAIL: no $f"; exit 1; }; done
INJECTIONS=${INJECTIONS:-1}
BOUND_S=${BOUND_S:-60}
PROGRAM=${PROGRAM:-worker}
TRAIN_ARGS=${TRAIN_ARGS:---limit 24000 --batch-size 32 --commit-every 2}
MIN_ACCURACY=${MIN_ACCURACY:-70}
RETURN_BOUND_S=${RETURN_BOUND_S:-$BOUND_S}

source "$REPO/tests/multihost/hosts.sh"
WORK=$(mktemp -d /tmp/kolo-elastic-hosts.XXXXXX)
kh_on_down "rm -rf '$WORK'"
kh_up 3 || exit 1
cd "$WORK"
source "$REPO/tests/multihost/checks.sh"

printf 'h0:2\nh1:2\nh2:2\n' > hosts
printf '#!/bin/sh\nexec cat %s/hosts\n' "$WORK" > discover.sh
chmod +x discover.sh
now() { date +%s.%N; }
# The first line matching regex $1 in `out` after line $3 (default 0), waiting up to $2 s.
line_for() {
  local i
  for ((i = 0; i < ${2:-60} * 10; i++)); do
    tail -n +$((${3:-0} + 1)) out 2>/dev/null | grep -m1 -E -- "$1" && return 0
    sleep 0.1
  done
  return 1
}
lines() { wc -l < out; }
step_at() { sed -n 's/.* at \([0-9.]*\)$/\1/p'; }

case $PROGRAM in
worker)
  cmd=("$W" 100000000 --sleep-ms 10 --until-file "$WORK/stop")
  first_steps='^\[5\] step 20 gen 0 '
  step_of() { echo "^\\[[0-9]+\\] step [0-9]+ gen [0-9]+ rank [0-9]+ size $1 .* ok at"; }
  ;;
train)
  cmd=(/usr/bin/python3 "$REPO/examples/python/elastic_fashion_mnist.py" --log-steps $TRAIN_ARGS)
  first_steps='^\[0\] step 3 epoch '
  step_of() { echo "^\\[0\\] step [0-9]+ epoch [0-9]+ size $1 .* at"; }
  ;;
*) echo "unknown PROGRAM $PROGRAM"; exit 2 ;;
esac
# --join-timeout 120: h2's workers, started again on loaded cores, once took over the default
# 30 s to reach init(); generation 2 then formed without them and h2 came back in generation 3.
kh_exec h0 "$K" --min-np 2 --host-discovery-script "$WORK/discover.sh" --rsh "ssh -F $KH_SSH_CONFIG" \
  --elastic-timeout 60 --join-timeout 120 --timeout 1500 "${cmd[@]}" > out 2>&1 &
job=$!

gen=0
line_for 'generation 0: 6 workers' 120 > /dev/null || fail "no first generation of 6 workers"
line_for "$first_steps" 120 > /dev/null || fail "no steps in generation 0"
recoveries=() returns=()
for ((inj = 1; inj <= INJECTIONS && fails == 0; inj++)); do
  from=$(lines)
  t_loss=$(now)
  case $case in
  kill-host) kh_kill h2 ;;
  link-down) kh_link h2 down ;;
  *) echo "unknown case $case"; exit 2 ;;
  esac
  gen=$((gen + 1))
  line_for "generation $gen: 4 workers \\(h0: [0-9, ]+; h1: [0-9, ]+\\)" 60 > /dev/null ||
    { fail "injection $inj: no generation $gen of the 4 survivors"; break; }
  at=$(line_for "$(step_of 4)" 60 "$from" | step_at)
  [ -n "$at" ] || { fail "injection $inj: no step in generation $gen"; break; }
  recoveries+=("$(awk -v a="$at" -v b="$t_loss" 'BEGIN { printf "%.2f", a - b }')")
  printf 'h0:2\nh1:2\n' > hosts
  [ "$case" = link-down ] && kh_link h2 up
  sleep 2.5  # a discovery run without h2: listed again, it is a new host
  expect "injection $inj: nothing of the job left on h2" clean_within h2 30
  from=$(lines)
  t_back=$(now)
  printf 'h0:2\nh1:2\nh2:2\n' > hosts
  gen=$((gen + 1))
  line_for "generation $gen: 6 workers \\(h0: [0-9, ]+; h1: [0-9, ]+; h2: [0-9, ]+\\)" 60 > /dev/null ||
    { fail "injection $inj: h2 did not come back in generation $gen"; break; }
  published=$(awk -v a="$(now)" -v b="$t_back" 'BEGIN { printf "%.1f", a - b }')
  at=$(line_for "$(step_of 6)" 60 "$from" | step_at)
  [ -n "$at" ] || { fail "injection $inj: no step of h2's new workers"; break; }
  returns+=("$(awk -v a="$at" -v b="$t_back" 'BEGIN { printf "%.2f", a - b }')")
  echo "injection $inj ($case): recovery ${recoveries[-1]} s, return ${returns[-1]} s (its workers all at init() after ~$published s)"
  sleep 1
done
expect "the job was still running after the injections" kill -0 $job
[ "$PROGRAM" = worker ] && touch stop
for ((i = 0; i < 12000; i++)); do kill -0 $job 2>/dev/null || break; sleep 0.1; done
kill -0 $job 2>/dev/null && { fail "kolorun still running 20 min after the injections"; kill -9 $job; }
wait $job
rc=$?
expect "kolorun exits 0" eq "$rc" 0
[ "$INJECTIONS" -gt 0 ] && expect "kolorun names the lost host" has out "elastic: (lost host h2|worker [0-9]+ on h2 )"
# Rank 0 is worker 0 (h0) in every generation: its steps are the committed ones,
# each exactly once (the worker counts from 0, the training job's commits from 1).
if [ "$PROGRAM" = worker ]; then
  expect "no wrong sum" eq "$(grep -c WRONG out)" 0
  sed -n 's/^\[0\] step \([0-9]*\) gen [0-9]* rank 0 .*/\1/p' out > steps0
  first=0
else
  sed -n 's/^\[0\] step \([0-9]*\) epoch .*/\1/p' out > steps0
  first=1
  accuracy=$(sed -n 's/^\[0\] test set: .*accuracy \([0-9.]*\)%.*/\1/p' out)
  echo "test accuracy: ${accuracy:-none} %"
  expect "test accuracy ${accuracy:-none} % >= $MIN_ACCURACY %" within "$MIN_ACCURACY" "${accuracy:-0}" 0
fi
last=$(tail -1 steps0)
seq "$first" "${last:-0}" > want0
expect "rank 0's steps $first..$last each exactly once" cmp -s want0 steps0
for r in "${recoveries[@]}"; do expect "recovery $r s <= $BOUND_S s" within "$r" 0 "$BOUND_S"; done
for r in "${returns[@]}"; do expect "return $r s <= $RETURN_BOUND_S s" within "$r" 0 "$RETURN_BOUND_S"; done
expect "$INJECTIONS injections measured" eq "${#recoveries[@]}" "$INJECTIONS"
echo "recovery times (s): ${recoveries[*]}"
echo "return times (s): ${returns[*]}"
for h in h0 h1 h2; do expect "nothing of the job left on $h" clean_within "$h" 30; done
[ "$fails" = 0 ] && echo "elastic_hosts_test $case: all passed" || { echo "--- out:"; tail -40 out; echo "elastic_hosts_test $case: $fails failed"; }
exit $((fails > 0))
