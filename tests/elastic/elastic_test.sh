#!/usr/bin/env bash
# Elastic kolorun on this machine: two "hosts" by name (localhost and
# 127.0.0.1 both run here, each with its own agent; the workers share one
# /dev/shm). Cases:
#   reform     3 workers; the one on 127.0.0.1 is SIGKILLed mid-run: the
#              survivors re-form (generation 1, 2 workers), the host is listed
#              again and its new worker joins (generation 2, 3 workers); every
#              sum exact, rank 0's steps each exactly once, exit 0
#   torch      reform with kolo_torch (WORKER is torch_elastic_worker): 3 workers
#              train, the one on 127.0.0.1 is SIGKILLed; the survivors restore
#              the commit, reform the DistributedOptimizer, reshard the sampler
#              and train on 2; the host is listed again and its new worker
#              joins mid-epoch (generation 2, 3 workers) and they finish; the
#              replay finds every sample once per epoch, 3 world sizes, and
#              the parameters of one process trained on the same batches
#   torch-rank0  the same, but the host lost and listed again is rank 0's:
#              the newcomer is rank 0 and gets the state from rank 1
#   min-np     --min-np 2, one of 2 workers killed, the host never listed
#              again: exit 1 after --elastic-timeout, naming it; nothing left
#   discovery  a first run that fails or prints junk: exit 1, nothing started;
#              a later failing run: a warning, the job goes on
#   usage      inconsistent elastic flags: exit 2 with the reason
# Usage: elastic_test.sh CASE KOLORUN WORKER
set -uo pipefail
CASE=$1 KOLORUN=$2 WORKER=$3
D=$(mktemp -d /tmp/kolo-elastic-XXXXXX)
KPID=
cleanup() {
  [ -n "$KPID" ] && kill -KILL -- -"$KPID" 2>/dev/null
  pkill -KILL -f "$D/" 2>/dev/null
  rm -rf "$D"
}
trap cleanup EXIT
fail() { echo "FAIL ($CASE): $*"; echo "--- kolorun output:"; tail -60 "$D/out" 2>/dev/null; exit 1; }
# Waits (up to $2 s) for a line matching the regex $1 in the job's output.
wait_for() {
  local i
  for ((i = 0; i < ${2:-60} * 10; i++)); do
    grep -Eq -- "$1" "$D/out" 2>/dev/null && return 0
    sleep 0.1
  done
  fail "no line matching '$1' within ${2:-60} s"
}
printf '#!/bin/sh\nexec cat %s/hosts\n' "$D" > "$D/discover.sh"
chmod +x "$D/discover.sh"
# Starts kolorun in its own process group (cleanup kills the group).
start() {
  setsid "$KOLORUN" "$@" > "$D/out" 2>&1 &
  KPID=$!
}
finish() {
  wait "$KPID"
  RC=$?
  KPID=
}
worker_pid() { sed -n "s/^\[$1\] pid \([0-9]*\) worker .*/\1/p" "$D/out" | head -1; }

case $CASE in
reform)
  printf 'localhost:2\n127.0.0.1:1\n' > "$D/hosts"
  start --min-np 2 --max-np 3 --host-discovery-script "$D/discover.sh" --elastic-timeout 60 --timeout 240 \
    "$WORKER" 300 --sleep-ms 20
  wait_for 'generation 0: 3 workers \(localhost: 0, 1; 127.0.0.1: 2\)'
  wait_for '^\[2\] step 30 gen 0 rank 2 size 3'
  kill -KILL "$(worker_pid 2)"
  wait_for 'generation 1: 2 workers \(localhost: 0, 1\)'
  wait_for '^\[0\] step [0-9]+ gen 1 rank 0 size 2 sum [0-9]+ ok'
  printf 'localhost:2\n' > "$D/hosts"
  sleep 2.5  # one discovery run without the host: it may come back
  printf 'localhost:2\n127.0.0.1:1\n' > "$D/hosts"
  wait_for 'generation 2: 3 workers \(localhost: 0, 1; 127.0.0.1: 3\)'
  finish
  [ "$RC" = 0 ] || fail "kolorun exited $RC, want 0"
  grep -q WRONG "$D/out" && fail "a wrong sum"
  grep -q 'worker 2 on 127.0.0.1 was killed by signal 9 (SIGKILL); host 127.0.0.1 blacklisted' "$D/out" ||
    fail "the lost worker is not named"
  for w in 0 1; do
    grep -Eq "^\[$w\] recovering: .*rank 2 .*died" "$D/out" || fail "worker $w did not see rank 2 die"
    grep -q "^\[$w\] recovering: hosts updated" "$D/out" || fail "worker $w did not re-form for the new host"
  done
  for w in 0 1 3; do
    grep -Eq "^\[$w\] step 299 gen 2 rank [0-2] size 3 sum [0-9]+ ok" "$D/out" || fail "worker $w did not finish in generation 2"
  done
  # Rank 0's steps (worker 0 in every generation) are the committed ones:
  # each of 0..299 exactly once, in order. Every worker's steps only go up.
  seq 0 299 > "$D/want"
  sed -n 's/^\[0\] step \([0-9]*\) gen [0-9]* rank 0 .*/\1/p' "$D/out" > "$D/got0"
  cmp -s "$D/want" "$D/got0" || fail "rank 0's steps are not 0..299 once each: $(diff "$D/want" "$D/got0" | head -5)"
  for w in 1 3; do
    sed -n "s/^\[$w\] step \([0-9]*\) .*/\1/p" "$D/out" > "$D/got"
    sort -n -u -c "$D/got" 2>/dev/null || fail "worker $w's steps repeat or go back"
  done
  # Generation 1 ran with 2 ranks, generation 2's newcomer started at the committed step, not 0.
  grep -Eq '^\[1\] step [0-9]+ gen 1 rank 1 size 2 ' "$D/out" || fail "no step of generation 1 on worker 1"
  first3=$(sed -n 's/^\[3\] step \([0-9]*\) .*/\1/p' "$D/out" | head -1)
  [ "${first3:-0}" -gt 30 ] || fail "worker 3 started at step ${first3:-none}, not at the committed step"
  ;;
torch | torch-rank0)
  # torch: the host listed last is lost and comes back (its newcomer is rank 2);
  # torch-rank0: the host listed first (rank 0's) — the newcomer is rank 0 and
  # the state comes from rank 1, the lowest that held it.
  if [ "$CASE" = torch ]; then
    hosts='localhost:2\n127.0.0.1:1\n' lost=2 survivors='0 1' newrank=2 ranks2='[01]'
    gen0='localhost: 0, 1; 127.0.0.1: 2' gen1='localhost: 0, 1' gen2='localhost: 0, 1; 127.0.0.1: 3'
  else
    hosts='127.0.0.1:1\nlocalhost:2\n' lost=0 survivors='1 2' newrank=0 ranks2='[12]'
    gen0='127.0.0.1: 0; localhost: 1, 2' gen1='localhost: 1, 2' gen2='127.0.0.1: 3; localhost: 1, 2'
  fi
  printf "$hosts" > "$D/hosts"
  start --min-np 2 --max-np 3 --host-discovery-script "$D/discover.sh" --elastic-timeout 60 --timeout 240 \
    "$WORKER" "$D" --hold-for-join
  wait_for "generation 0: 3 workers \\($gen0\\)"
  wait_for "^\\[$lost\\] step 10 gen 0 rank $lost size 3\$" 120
  kill -KILL "$(worker_pid $lost)"
  wait_for "generation 1: 2 workers \\($gen1\\)"
  wait_for "^\\[${survivors%% *}\\] step [0-9]+ gen 1 rank 0 size 2\$"
  printf 'localhost:2\n' > "$D/hosts"
  sleep 2.5  # one discovery run without the host: it may come back
  printf "$hosts" > "$D/hosts"
  wait_for "generation 2: 3 workers \\($gen2\\)"
  finish
  [ "$RC" = 0 ] || fail "kolorun exited $RC, want 0"
  # The newcomer starts where the others are (the state's root's commit), not at the start.
  joined=$(sed -n "s/^\\[3\\] joined: gen 2 rank $newrank size 3, epoch \\([0-9]*\\) from sample \\([0-9]*\\), step \\([0-9]*\\)\$/\\1 \\2 \\3/p" "$D/out")
  [ -n "$joined" ] || fail "worker 3 did not join as rank $newrank of 3"
  read -r e p k <<< "$joined"
  [ "$k" -gt 10 ] || fail "worker 3 joined at step $k, not at the committed step"
  for w in $survivors; do
    grep -Eq "^\[$w\] recovering: .*rank $lost .*died" "$D/out" || fail "worker $w did not see rank $lost die"
    grep -Eq "^\[$w\] re-formed: gen 1 rank [01] size 2, epoch 0 from sample [0-9]+" "$D/out" ||
      fail "worker $w did not re-form as one of 2"
    grep -q "^\[$w\] recovering: hosts updated" "$D/out" || fail "worker $w did not re-form for the new host"
    grep -Eq "^\[$w\] re-formed: gen 2 rank $ranks2 size 3, epoch $e from sample $p\$" "$D/out" ||
      fail "worker $w did not re-form as one of 3 where worker 3 joined (epoch $e sample $p)"
  done
  grep -Eq "^\[3\] step $((k + 1)) gen 2 rank $newrank size 3\$" "$D/out" || fail "worker 3 did not train from step $((k + 1))"
  grep -Eq '^\[3\] done: [0-9]+ steps$' "$D/out" || fail "worker 3 did not finish"
  "$WORKER" "$D" --replay > "$D/replay" 2>&1 || fail "$(cat "$D/replay")"
  grep -q '^replay: OK: .* 3 world sizes, ' "$D/replay" || fail "replay: $(cat "$D/replay")"
  cat "$D/replay"
  ;;
min-np)
  printf 'localhost:1\n127.0.0.1:1\n' > "$D/hosts"
  start --min-np 2 --host-discovery-script "$D/discover.sh" --elastic-timeout 3 --timeout 120 \
    "$WORKER" 100000 --sleep-ms 20
  wait_for '^\[1\] step 10 gen 0 rank 1 size 2'
  p0=$(worker_pid 0)
  kill -KILL "$(worker_pid 1)"
  finish
  [ "$RC" = 1 ] || fail "kolorun exited $RC, want 1"
  grep -q 'elastic: 1 live worker, fewer than --min-np 2: waiting up to 3 s for hosts' "$D/out" || fail "no waiting message"
  grep -q 'elastic: only 1 live worker for 3 s, fewer than --min-np 2' "$D/out" || fail "no --min-np message"
  sleep 0.5
  kill -0 "$p0" 2>/dev/null && fail "worker 0 (pid $p0) still runs"
  ;;
discovery)
  printf '#!/bin/sh\necho oops >&2\nexit 3\n' > "$D/bad.sh"
  printf '#!/bin/sh\necho "h0:x"\n' > "$D/junk.sh"
  chmod +x "$D/bad.sh" "$D/junk.sh"
  "$KOLORUN" --min-np 1 --host-discovery-script "$D/bad.sh" "$WORKER" 5 > "$D/out" 2>&1
  RC=$?
  [ "$RC" = 1 ] || fail "a failing first discovery: exit $RC, want 1"
  grep -q "host discovery script: $D/bad.sh exited with code 3 (its first run must succeed); nothing was started" "$D/out" ||
    fail "the failing script is not named"
  "$KOLORUN" --min-np 1 --host-discovery-script "$D/junk.sh" "$WORKER" 5 > "$D/out" 2>&1
  RC=$?
  [ "$RC" = 1 ] || fail "junk from discovery: exit $RC, want 1"
  grep -q "line 1: the slot count must be a positive integer, got 'x'" "$D/out" || fail "the junk line is not named"
  # Later runs failing: the last list stays, the job finishes.
  printf '#!/bin/sh\n[ -e %s/broken ] && exit 4\necho localhost:2\n' "$D" > "$D/flaky.sh"
  chmod +x "$D/flaky.sh"
  start --min-np 2 --host-discovery-script "$D/flaky.sh" --timeout 120 "$WORKER" 150 --sleep-ms 20
  wait_for '^\[0\] step 5 '
  touch "$D/broken"
  wait_for 'exited with code 4 \(keeping the hosts it listed last\)'
  finish
  [ "$RC" = 0 ] || fail "kolorun exited $RC after a failing later discovery, want 0"
  [ "$(grep -c 'keeping the hosts it listed last' "$D/out")" = 1 ] || fail "the same warning repeated"
  ;;
usage)
  check_usage() {  # expected text, then kolorun's arguments
    local want=$1
    shift
    "$KOLORUN" "$@" > "$D/out" 2>&1
    local rc=$?
    [ "$rc" = 2 ] || fail "kolorun $*: exit $rc, want 2"
    grep -qF -- "$want" "$D/out" || fail "kolorun $*: no '$want'"
  }
  check_usage "--max-np 2 is less than --min-np 3" --min-np 3 --max-np 2 -np 3 "$WORKER" 1
  check_usage "-np 1 is less than --min-np 2" --min-np 2 -np 1 "$WORKER" 1
  check_usage "-np 4 is more than --max-np 3" -np 4 --min-np 2 --max-np 3 "$WORKER" 1
  check_usage "--host-discovery-script $D/none: cannot execute it" --host-discovery-script "$D/none" "$WORKER" 1
  check_usage "give either --host-discovery-script or -H/--hostfile, not both" \
    --host-discovery-script "$D/discover.sh" -H localhost:2 "$WORKER" 1
  check_usage "--output-dir is not supported in an elastic job" --min-np 1 -np 2 --output-dir "$D/o" "$WORKER" 1
  check_usage "--elastic-timeout applies to elastic jobs" -np 2 --elastic-timeout 5 "$WORKER" 1
  check_usage "an elastic job needs its hosts" --min-np 1 "$WORKER" 1
  check_usage "--elastic-timeout must be positive" --min-np 1 -np 1 --elastic-timeout 0 "$WORKER" 1
  check_usage "--join-timeout applies to elastic jobs" -np 2 --join-timeout 5 "$WORKER" 1
  check_usage "--join-timeout must be positive" --min-np 1 -np 1 --join-timeout 0 "$WORKER" 1
  ;;
*) fail "unknown case" ;;
esac
echo "PASS ($CASE)"
