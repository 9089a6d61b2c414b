#!/usr/bin/env bash
# Fault injection with real processes: a rank (or kolorun itself) is killed
# with SIGKILL in the middle of a long allreduce loop of 4 ranks.
#
#   fault_test.sh KOLORUN FAULT_RANK MODE [RUNS]
#
# MODE
#   rank     RUNS runs (default 20), alternating shm and tcp: kill -9 of a
#            random rank at a random moment of the loop
#   between  RUNS runs (default 2): a random rank dies (SIGKILL) during a
#            compute phase, the others meet it at their next allreduce
#   launcher RUNS runs (default 2): kill -9 of kolorun itself
#   stopped  RUNS runs (default 4), alternating shm and tcp: a random rank is
#            frozen (SIGSTOP, a hung rank rather than a dead one) with
#            KOLO_TIMEOUT_MS=5000: every survivor times out and names it as
#            "unresponsive" after the roll call (the ranks that timed out
#            say so in the store; the one that says nothing is named, also
#            over TCP, where a rank's own wait may be on a waiting neighbour).
#
# What every run must show (rank and between):
#   - the job ends within END_BOUND_S of the death (kolorun's exit);
#   - every survivor catches a kolo error that starts with "kolo rank R:" and
#     names the dead rank, within DETECT_BOUND_S of the death (kolo's own
#     detection: the survivors ignore kolorun's SIGTERM, see fault_rank.cc),
#     and its next collective fails too;
#   - kolorun exits 137 (128+SIGKILL) naming the dead rank as the first failure;
#   - no process of the job is left (pid files) and /dev/shm holds no
#     kolo-<jobid>-* segment.
# stopped: the same, with the survivors' errors due within
# KOLO_TIMEOUT_MS + the roll call (2 s) + DETECT_BOUND_S, kolorun exiting 3 (a survivor's code) and
# SIGKILLing the frozen rank after its grace period.
# launcher: every rank is gone within END_BOUND_S and no segment is left.
#
# FAULT_TRANSPORTS (default "shm tcp") lists the transports the runs cycle
# through; "hier" runs the 4 ranks as two emulated hosts a, b of 2 ranks
# each (KOLO_HOSTNAME, ../collectives/as_host.sh): hierarchical collectives.
#
# Bounds are generous for a loaded 2-core machine; kolo's documented
# detection bound is 10 s (KOLO_PEER_TIMEOUT_MS, dead pid / EOF seen at once).
set -u
KOLORUN=$1 BIN=$2 MODE=$3
case $MODE in rank) RUNS=${4:-20} ;; stopped) RUNS=${4:-4} ;; *) RUNS=${4:-2} ;; esac
NP=${FAULT_NP:-4}
DETECT_BOUND_S=${DETECT_BOUND_S:-10}
END_BOUND_S=${END_BOUND_S:-30}
fail=0
base=$(mktemp -d)
trap 'rm -rf "$base"' EXIT

now() { date +%s.%N; }
# a - b > bound ?
exceeds() { awk -v a="$1" -v b="$2" -v c="$3" 'BEGIN { exit !(a - b > c) }'; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a - b }'; }

# wait_files DIR PATTERN-PREFIX N SECONDS: until DIR holds N files PREFIX.*
wait_files() {
  local dir=$1 prefix=$2 n=$3 secs=$4 i
  for ((i = 0; i < secs * 20; i++)); do
    local have
    have=$(find "$dir" -maxdepth 1 -name "$prefix.*" ! -name '*.tmp' | wc -l)
    [ "$have" -ge "$n" ] && return 0
    sleep 0.05
  done
  return 1
}

# A process is gone when it no longer exists or has exited and only waits to
# be reaped by whichever parent it has now (state Z in /proc).
gone() {
  local pid=$1
  kill -0 "$pid" 2>/dev/null || return 0
  [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" == "Z" ]
}

# check_cleanup DIR WHAT: every pid of the job gone within 10 s, no segment.
check_cleanup() {
  local dir=$1 what=$2 ok=0 f pid i
  for f in "$dir"/rank.*.pid; do
    pid=$(cat "$f")
    for ((i = 0; i < 200; i++)); do gone "$pid" && break; sleep 0.05; done
    if ! gone "$pid"; then
      echo "FAILED $what: $(basename "$f") (pid $pid) still running:"; ps -o pid,stat,args -p "$pid"
      kill -9 "$pid" 2>/dev/null; ok=1
    fi
  done
  local job
  job=$(cat "$dir/job_id" 2>/dev/null)
  if [ -z "$job" ]; then
    echo "FAILED $what: no job id recorded"; ok=1
  elif ls /dev/shm | grep -q "^kolo-$job-"; then
    echo "FAILED $what: shared memory left in /dev/shm:"; ls /dev/shm | grep "^kolo-$job-"; ok=1
    rm -f /dev/shm/kolo-"$job"-*
  fi
  return $ok
}

# The named-rank error of survivor r: the lines kolorun relayed as "[r] ".
check_survivors() {
  local out=$1 victim=$2 t_death=$3 what=$4 ok=0 r
  local host="( \(host [^)]+\))?"
  local names="rank $victim \(pid [0-9]+\) died|rank $victim$host closed its connection|lost connection to rank $victim$host[: ]"
  local bound=$DETECT_BOUND_S
  if [ "$MODE" == stopped ]; then
    names="unresponsive: rank $victim \(not waiting in any collective"
    bound=$((DETECT_BOUND_S + 5 + 3))  # + the timeout, + the roll call
  fi
  for ((r = 0; r < NP; r++)); do
    [ "$r" -eq "$victim" ] && continue
    local lines
    lines=$(grep "^\[$r\] " "$out" | sed "s/^\[$r\] //")
    if ! grep -q "^caught: kolo rank $r: " <<< "$lines"; then
      echo "FAILED $what: survivor $r reported no kolo error starting with 'kolo rank $r:'"; ok=1; continue
    fi
    # The dead rank, as the shm transport (dead pid), TCP (end of stream,
    # reset) or a peer's report names it.
    if ! grep -Eq "$names" <<< "$lines"; then
      echo "FAILED $what: survivor $r's error does not name the dead rank $victim:"; sed 's/^/    /' <<< "$lines"; ok=1
    fi
    if ! grep -q "^next: kolo rank $r: communicator is unusable after an earlier failure" <<< "$lines"; then
      echo "FAILED $what: survivor $r's next collective did not fail with the earlier error"; ok=1
    fi
    local at
    at=$(grep -m1 "^error-at " <<< "$lines" | awk '{print $2}')
    if [ -n "$at" ] && exceeds "$at" "$t_death" "$bound"; then
      echo "FAILED $what: survivor $r caught its error $(elapsed "$at" "$t_death") s after the death (bound $bound s)"; ok=1
    fi
    [ -n "$at" ] && detect_times+=" $(elapsed "$at" "$t_death")"
  done
  return $ok
}

detect_times=""
end_times=""
read -r -a transports <<< "${FAULT_TRANSPORTS:-shm tcp}"
for ((run = 0; run < RUNS; run++)); do
  transport=${transports[run % ${#transports[@]}]}
  wrap=()
  kolo_transport=$transport
  if [ "$transport" == hier ]; then
    wrap=("$(dirname "$0")/../collectives/as_host.sh" "a a b b")
    kolo_transport=auto
  fi
  dir="$base/run$run"
  mkdir -p "$dir"
  out="$dir/out"
  victim=$((RANDOM % NP))
  args=("$dir")
  [ "$MODE" == between ] && args+=(--compute-ms 3000 --die-rank "$victim" --die-iter $((1 + RANDOM % 3)))
  grace=60 timeout_ms=${KOLO_TIMEOUT_MS:-}
  [ "$MODE" == stopped ] && grace=5 timeout_ms=5000
  # In a subshell that exits normally: no "Killed" notice from this shell
  # when kolorun is the one killed.
  (KOLO_TIMEOUT_MS=$timeout_ms KOLO_TRANSPORT=$kolo_transport timeout -s KILL 300 \
    "$KOLORUN" -np "$NP" --grace-period $grace "${wrap[@]}" "$BIN" "${args[@]}" > "$out" 2>&1; exit $?) 2>/dev/null &
  job_pid=$!
  what="$MODE run $run ($transport, victim $victim)"
  [ "$MODE" == launcher ] && what="$MODE run $run ($transport)"
  ok=0
  if ! wait_files "$dir" running "$NP" 120; then
    echo "FAILED $what: the ranks did not all start their loop within 120 s"; ok=1
    # kolorun's death takes its ranks along (PDEATHSIG); timeout passes TERM on.
    if [ -s "$dir/kolorun.pid" ]; then kill -9 "$(cat "$dir/kolorun.pid")"; else kill "$job_pid"; fi 2>/dev/null
  fi
  if [ $ok -eq 0 ]; then
    delay=$(awk -v r=$RANDOM 'BEGIN { printf "%.3f", r % 2000 / 1000 }')
    case $MODE in
      rank)
        sleep "$delay"
        t_death=$(now)
        kill -9 "$(cat "$dir/rank.$victim.pid")"
        ;;
      between)
        # The victim kills itself; its pid file then names a dead process.
        t_death=""
        pid=$(cat "$dir/rank.$victim.pid")
        for ((i = 0; i < 1200; i++)); do kill -0 "$pid" 2>/dev/null && [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ] || break; sleep 0.05; done
        t_death=$(now)
        ;;
      stopped)
        sleep "$delay"
        t_death=$(now)
        kill -STOP "$(cat "$dir/rank.$victim.pid")"
        ;;
      launcher)
        sleep "$delay"
        t_death=$(now)
        kill -9 "$(cat "$dir/kolorun.pid")"
        ;;
    esac
  fi
  wait "$job_pid"
  rc=$?
  t_end=$(now)
  if [ $ok -eq 0 ]; then
    end_times+=" $(elapsed "$t_end" "$t_death")"
    if exceeds "$t_end" "$t_death" "$END_BOUND_S"; then
      echo "FAILED $what: the job ended $(elapsed "$t_end" "$t_death") s after the death (bound $END_BOUND_S s)"; ok=1
    fi
    if [ "$MODE" == launcher ]; then
      [ $rc -eq 137 ] || { echo "FAILED $what: kolorun exit $rc, expected 137 (killed)"; ok=1; }
    elif [ "$MODE" == stopped ]; then
      [ $rc -eq 3 ] || { echo "FAILED $what: kolorun exited $rc, expected 3 (a survivor's kolo error)"; ok=1; }
      grep -Eq "^kolorun: rank [0-9]+ exited with code 3 \(first failure\)" "$out" ||
        { echo "FAILED $what: kolorun did not name the first failure"; ok=1; }
      check_survivors "$out" "$victim" "$t_death" "$what" || ok=1
    else
      [ $rc -eq 137 ] || { echo "FAILED $what: kolorun exited $rc, expected 137 (the victim's SIGKILL)"; ok=1; }
      grep -q "^kolorun: rank $victim was killed by signal 9 (SIGKILL) (first failure)" "$out" ||
        { echo "FAILED $what: kolorun did not name rank $victim as the first failure"; ok=1; }
      check_survivors "$out" "$victim" "$t_death" "$what" || ok=1
    fi
  fi
  check_cleanup "$dir" "$what" || ok=1
  if [ $ok -eq 0 ]; then
    echo "ok: $what"
    [ -n "${FAULT_VERBOSE:-}" ] && sed 's/^/    /' "$out"
  else
    fail=1; echo "--- output of $what:"; cat "$out"
  fi
done
echo "job end after the death (s):$end_times"
[ "$MODE" != launcher ] && echo "survivors' error after the death (s):$detect_times"
exit $fail
