#!/usr/bin/env bash
# kolorun -H / --hostfile on emulated hosts h0, h1, h2 (hosts.sh), launched on h0; one case per run:
#   kolorun_hosts_test.sh e2e          2 hosts x 2 ranks (-H) and 3 hosts x 2,2,1 (--hostfile): tags,
#                                      rank ids, local ranks, host names and working directory seen
#                                      by each rank, -x VAR and -x VAR=value, --output-dir, the
#                                      exit code of a failing remote rank named with its host, a
#                                      working directory missing on a remote host
#   kolorun_hosts_test.sh bench        kolo-bench (every collective, results verified) on 2x2 and
#                                      2,2,1 ranks, hierarchical on and off, several dtypes
#   kolorun_hosts_test.sh unreachable  a host name that does not resolve and a host whose link is
#                                      down: exit 1, ssh's message and the host named, nothing
#                                      started on any host
#   kolorun_hosts_test.sh signal       SIGINT to kolorun reaches every rank (and its children) on
#                                      every host: exit 130, nothing left anywhere
#   kolorun_hosts_test.sh launcher-killed  kill -9 of kolorun: every agent sees its connection
#                                      close and kills its ranks; nothing left anywhere
#   kolorun_hosts_test.sh mpirun       the same kolo-bench under Open MPI's mpirun -H across h0, h1
#                                      (plm_rsh_agent = the harness's ssh; KOLO_STORE_ADDR by -x)
#   kolorun_hosts_test.sh settings     KOLO_* set only on the launching host reach every rank on
#                                      every host (-x wins); KOLO_HIERARCHICAL=0 runs every rank
#                                      flat; settings differing by host fail every rank within 10 s
#                                      naming them; kolorun's, C++'s and Python's local ranks agree
#   kolorun_hosts_test.sh torchrun     torchrun's variables across hosts: MASTER_ADDR is rank 0's
#                                      host's address, MASTER_PORT one port for all; a gloo env://
#                                      program that never imports kolo (Debian's torch) runs on
#                                      2 hosts x 2, launched on rank 0's host and on a host without
#                                      ranks (rank 0's agent on h0 then picks MASTER_PORT)
# Needs root (skips with 77 otherwise) and KOLO_TEST_BUILD_DIR (set by ctest).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
case=${1:?usage: kolorun_hosts_test.sh e2e|bench|unreachable|signal|launcher-killed|mpirun|settings|torchrun}
B=${KOLO_TEST_BUILD_DIR:-$REPO/build}
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
K=$B/tools/kolorun/kolorun
R=$B/tests/launcher/kolo_test_rank
BENCH=$B/tools/kolo-bench/kolo-bench
for f in "$K" "$R" "$BENCH"; do [ -x "$f" ] || { echo "FAIL: no $f"; exit 1; }; done

source "$HERE/hosts.sh"
WORK=$(mktemp -d /tmp/kolorun-hosts-test.XXXXXX)
kh_on_down "rm -rf '$WORK'"
kh_up 3 || exit 1
RSH="ssh -F $KH_SSH_CONFIG"
cd "$WORK"  # the working directory the ranks must see on every host

source "$HERE/checks.sh"
source "$HERE/../common/ports.sh"
# Nothing of a job left on any host.
no_leftovers() {
  local h r=0
  for h in h0 h1 h2; do clean_within "$h" 10 || r=1; done
  return $r
}

# The "where" line of each rank: rank, local rank/size, hostname, working directory.
where_of() { grep -E "^\[$2\] rank=" "$1" | sed "s/^\[$2\] //"; }

case $case in
e2e)
  export KOLO_T_PASSED="passed value"
  kh_exec h0 "$K" -H h0:2,h1:2 --rsh "$RSH" -x KOLO_T_PASSED -x "KOLO_T_SET=set here" \
    "$R" where KOLO_T_PASSED KOLO_T_SET > out 2> err
  expect "-H h0:2,h1:2 exits 0" eq "$?" 0
  expect "-H: nothing on kolorun's stderr" eq "$(cat err)" ""
  for r in 0 1 2 3; do
    expect "-H: rank $r runs on h$((r / 2)) as local $((r % 2))/2 in $WORK" \
      eq "$(where_of out $r)" "rank=$r local=$((r % 2))/2 host=h$((r / 2)) cwd=$WORK"
    expect "-H: -x VAR reaches rank $r" has_text out "[$r] KOLO_T_PASSED=passed value"
    expect "-H: -x VAR=value reaches rank $r" has_text out "[$r] KOLO_T_SET=set here"
  done

  printf '# three hosts\nh0 slots=2\nh1:2   # by colon\n\nh2\n' > hostfile
  kh_exec h0 "$K" --hostfile hostfile --rsh "$RSH" "$R" where > out 2> err
  expect "--hostfile 2,2,1 exits 0" eq "$?" 0
  locals=(0/2 1/2 0/2 1/2 0/1)
  for r in 0 1 2 3 4; do
    expect "--hostfile: rank $r on h$((r / 2)) as ${locals[r]}" \
      eq "$(where_of out $r)" "rank=$r local=${locals[r]} host=h$((r / 2)) cwd=$WORK"
  done
  kh_exec h0 "$K" -np 3 --hostfile hostfile --rsh "$RSH" "$R" where > out 2> err
  expect "--hostfile -np 3: ranks 0-2 on h0, h1" \
    eq "$(grep -c 'rank=' out) $(where_of out 2)" "3 rank=2 local=0/1 host=h1 cwd=$WORK"

  kh_exec h0 "$K" -H h0:2,h1:2,h2:1 --rsh "$RSH" --output-dir "$WORK/logs" "$R" lines 2 > out 2> err
  expect "--output-dir exits 0, relays nothing" eq "$?:$(cat out err)" "0:"
  for r in 0 1 2 3 4; do
    expect "--output-dir: rank $r's files" \
      eq "$(cat logs/rank.$r.stdout)|$(cat logs/rank.$r.stderr)" "out $r 0
out $r 1|err $r 0
err $r 1"
  done

  kh_exec h0 "$K" -H h0:2,h1:2 --rsh "$RSH" "$R" exit 7 3 > out 2> err
  expect "a failing rank on h1: its code" eq "$?" 7
  expect "a failing rank on h1: named with its host" has_text err "kolorun: rank 3 on h1 exited with code 7 (first failure)"
  kh_exec h0 "$K" -H h0:1,h1:1 --rsh "$RSH" sh -c 'kill -9 $$' > out 2> err
  expect "a rank killed by a signal: 128+9" eq "$?" 137
  expect "a rank killed by a signal: named" has_text err "was killed by signal 9 (SIGKILL) (first failure)"

  # A working directory that exists only on h0 (a tmpfs in h0's own mount namespace).
  mkdir private
  kh_exec h0 mount -t tmpfs kolorun-test "$WORK/private"
  kh_exec h0 mkdir "$WORK/private/sub"
  kh_exec h0 sh -c "cd '$WORK/private/sub' && exec '$K' -H h0:1,h1:1 --rsh '$RSH' '$R' where" > out 2> err
  expect "working directory missing on h1: exit 1" eq "$?" 1
  expect "working directory missing on h1: named" has_text err \
    "kolorun: cannot change to the working directory '$WORK/private/sub' on h1: No such file or directory (first failure)"
  kh_exec h0 umount "$WORK/private"
  expect "nothing left" no_leftovers
  ;;

bench)
  for hosts in h0:2,h1:2 h0:2,h1:2,h2:1; do
    for hier in 1 0; do
      for dt in f32 bf16 i64; do
        what="kolo-bench -H $hosts KOLO_HIERARCHICAL=$hier -d $dt"
        kh_exec h0 "$K" -H "$hosts" --rsh "$RSH" -x KOLO_HIERARCHICAL=$hier "$BENCH" -c all -d "$dt" \
          --sizes "8,4100,1048580" -n 2 -w 1 --time-budget 0 > out 2> err
        rc=$?
        expect "$what exits 0" eq "$rc" 0
        expect "$what: six collectives verified" eq "$(grep -c '^\[0\] # all results correct' out)" 6
        [ $rc = 0 ] || sed 's/^/    /' err | head -20
      done
    done
  done
  expect "nothing left" no_leftovers
  ;;

unreachable)
  kh_link h2 down
  kh_exec h0 "$K" -H h0:1,h1:1,nosuchhost:1,h2:1 --rsh "$RSH" "$R" sleep "$WORK" > out 2> err
  expect "unreachable hosts: exit 1" eq "$?" 1
  expect "unresolvable host named with ssh's message" has_text err \
    "kolorun: cannot reach host 'nosuchhost': \`ssh -o BatchMode=yes"
  expect "ssh's own words for the unresolvable host" has_text err "Could not resolve hostname nosuchhost"
  expect "host with its link down named" has_text err "kolorun: cannot reach host 'h2': "
  expect "the count" has_text err "kolorun: nothing was started (2 of 3 hosts unreachable)"
  expect "no rank started" eq "$(ls "$WORK" | grep -c '^rank\.')" 0
  kh_link h2 up
  expect "nothing left" no_leftovers
  ;;

signal|launcher-killed)
  mkdir pids
  kh_exec h0 "$K" -H h0:2,h1:2,h2:1 --rsh "$RSH" "$R" sleep "$WORK/pids" --grandchild > out 2> err &
  job=$!
  for i in $(seq 300); do [ "$(ls pids | grep -c '^rank\.[0-9]*\.pid$')" = 5 ] && break; sleep 0.1; done
  expect "5 ranks started" eq "$(ls pids | grep -c '^rank\.[0-9]*\.pid$')" 5
  # $! is the subshell that runs kh_exec; kolorun is its child (nsenter execs it).
  kolorun_pid=$(pgrep -P $job -x kolorun)
  expect "kolorun found" eq "$([ -n "$kolorun_pid" ] && echo yes)" yes
  if [ "$case" = signal ]; then
    kill -INT $kolorun_pid
    wait $job
    expect "SIGINT: exit 130" eq "$?" 130
    expect "SIGINT: named" has_text err "kolorun: interrupted (SIGINT); stopping 5 ranks on 3 hosts"
  else
    kill -KILL $kolorun_pid
    wait $job
    expect "kill -9: kolorun died of it" eq "$?" 137
  fi
  gone=1
  for f in pids/*.pid; do
    p=$(cat "$f")
    for i in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$p" 2>/dev/null && { echo "  $f (pid $p) still running"; gone=0; }
  done
  expect "$case: every rank and grandchild gone on every host" eq "$gone" 1
  expect "nothing left" no_leftovers
  ;;

mpirun)
  command -v mpirun > /dev/null || { echo "SKIP: no mpirun"; exit 77; }
  # Open MPI starts its daemons over the same ssh; kolo's ranks meet at rank 0's store, whose
  # address the README tells mpirun users to pass with -x.
  port=$(test_port)
  kh_exec h0 mpirun --allow-run-as-root -H h0:2,h1:2 -np 4 --mca plm_rsh_agent "$RSH" \
    --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 \
    -x KOLO_STORE_ADDR=h0:$port -x KOLO_SECRET=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n') \
    "$BENCH" -c all --sizes "8,4100,1048580" -n 2 -w 1 --time-budget 0 > out 2> err
  rc=$?
  expect "mpirun -H h0:2,h1:2 kolo-bench exits 0" eq "$rc" 0
  [ $rc = 0 ] || sed 's/^/    /' err | head -20
  expect "mpirun: 4 ranks" has_text out "# kolo-bench allreduce: 4 ranks"
  expect "mpirun: six collectives verified" eq "$(grep -c '^# all results correct' out)" 6
  expect "nothing left" no_leftovers
  ;;
settings)
  # kolo's settings set only on the launching host hold on every rank of every host (the remote
  # ranks' environment is a fresh ssh login's); -x still wins; KOLO_HOSTNAME is not forwarded.
  KOLO_T_JOBWIDE="launcher only" KOLO_SHM_CHUNK=131072 kh_exec h0 env -u KOLO_HOSTNAME "$K" -H h0:2,h1:2 \
    --rsh "$RSH" -x KOLO_T_X=from-x "$R" where KOLO_T_JOBWIDE KOLO_SHM_CHUNK KOLO_T_X > out 2> err
  expect "settings: the job exits 0" eq "$?" 0
  for r in 0 1 2 3; do
    expect "settings: rank $r (h$((r / 2))) has KOLO_T_JOBWIDE" has_text out "[$r] KOLO_T_JOBWIDE=launcher only"
    expect "settings: rank $r (h$((r / 2))) has KOLO_SHM_CHUNK" has_text out "[$r] KOLO_SHM_CHUNK=131072"
    expect "settings: rank $r (h$((r / 2))) has -x KOLO_T_X" has_text out "[$r] KOLO_T_X=from-x"
  done
  KOLO_T_JOBWIDE=forwarded kh_exec h0 "$K" -H h0:1,h1:1 --rsh "$RSH" -x KOLO_T_JOBWIDE=explicit \
    "$R" where KOLO_T_JOBWIDE > out 2> err
  expect "settings: -x VAR=value wins over the forwarded VAR" eq "$(grep -c 'KOLO_T_JOBWIDE=explicit' out)" 2

  # The issue's case: KOLO_HIERARCHICAL=0 on the launching host makes every rank flat (before,
  # h1's ranks went hierarchical and the job timed out blaming the network).
  IDENT=$B/tests/collectives/kolo_identity
  KOLO_HIERARCHICAL=0 kh_exec h0 "$K" -H h0:2,h1:2 --rsh "$RSH" "$IDENT" > out 2> err
  expect "settings: KOLO_HIERARCHICAL=0 on the launcher: exits 0" eq "$?" 0
  for r in 0 1 2 3; do
    expect "settings: rank $r runs flat TCP" has_text out \
      "identity rank=$r size=4 local_rank=$((r % 2)) local_size=2 transport=tcp sum=10"
  done

  # Ranks whose environments differ by host (as under mpirun or srun): every rank fails within
  # 10 s naming the variable, both values, the ranks and the hosts.
  t0=$(date +%s.%N)
  kh_exec h0 "$K" -H h0:2,h1:2 --rsh "$RSH" --timeout 60 \
    sh -c '[ "$(hostname)" = h1 ] && export KOLO_HIERARCHICAL=0; exec "$0"' "$IDENT" > out 2> err
  rc=$?
  took=$(awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN { print a - b }')
  expect "settings differ by host: the job fails" test "$rc" != 0
  expect "settings differ by host: within 10 s (took $took s)" awk -v t="$took" 'BEGIN { exit !(t <= 10) }'
  # (kolorun stops the job at the first rank's failure: one rank's message is enough.)
  expect "settings differ by host: a rank names the variable, values, ranks and hosts" grep -qE \
    '^\[[0-3]\]   KOLO_HIERARCHICAL=1 on ranks 0, 1 \(host h0\); KOLO_HIERARCHICAL=0 on ranks 2, 3 \(host h1\)$' err

  # Which ranks share a host has one answer: kolorun's KOLO_LOCAL_RANK, C++ (kolo_identity above)
  # and Python's hvd.local_rank()/cross_rank() agree on h0:2,h1:1.
  PY='import os, kolo.torch as hvd; hvd.init(); print("py", hvd.rank(), os.environ["KOLO_LOCAL_RANK"], hvd.local_rank(), hvd.local_size(), hvd.cross_rank(), hvd.cross_size())'
  kh_exec h0 "$K" -H h0:2,h1:1 --rsh "$RSH" -x PYTHONPATH="$B/python" /usr/bin/python3 -c "$PY" > out 2> err
  expect "python local ranks: exits 0" eq "$?" 0
  expect "python: rank 0 on h0" has_text out "[0] py 0 0 0 2 0 2"
  expect "python: rank 1 on h0" has_text out "[1] py 1 1 1 2 0 2"
  expect "python: rank 2 on h1" has_text out "[2] py 2 0 0 1 1 2"
  expect "nothing left" no_leftovers
  ;;
torchrun)
  GLOO=$REPO/tests/python/workers/torchrun_gloo_worker.py
  [ -x /usr/bin/python3 ] && /usr/bin/python3 -c "import torch" 2> /dev/null || { echo "SKIP: no Debian torch"; exit 77; }
  for launcher in h0 h2; do
    what="launched on $launcher"
    kh_exec $launcher "$K" -H h0:2,h1:2 --rsh "$RSH" "$R" where MASTER_ADDR MASTER_PORT GROUP_RANK > out 2> err
    expect "$what: exits 0" eq "$?" 0
    port=$(grep -m1 -oE '^\[0\] MASTER_PORT=[0-9]+$' out | cut -d= -f2)
    for r in 0 1 2 3; do
      expect "$what: rank $r has MASTER_ADDR of h0 ($(kh_addr h0)), one MASTER_PORT, GROUP_RANK $((r / 2))" eq \
        "$(grep -E "^\[$r\] (MASTER_ADDR|MASTER_PORT|GROUP_RANK)=" out | sed "s/^\[$r\] //" | tr '\n' ' ')" \
        "MASTER_ADDR=$(kh_addr h0) MASTER_PORT=$port GROUP_RANK=$((r / 2)) "
    done
    kh_exec $launcher "$K" -H h0:2,h1:2 --rsh "$RSH" --timeout 200 -x OMP_NUM_THREADS=1 /usr/bin/python3 "$GLOO" \
      > out 2> err
    rc=$?
    expect "$what: the gloo env:// program exits 0" eq "$rc" 0
    [ $rc = 0 ] || sed 's/^/    /' err | tail -20
    for r in 0 1 2 3; do
      expect "$what: gloo rank $r on h$((r / 2)): allreduce and allgather right" has_text out \
        "[$r] torchrun_gloo rank $r of 4: local $((r % 2))/2 group $((r / 2))/2 elastic True: OK"
    done
  done
  expect "nothing left" no_leftovers
  ;;
*) echo "unknown case $case"; exit 2 ;;
esac
[ "$fails" = 0 ] && echo "kolorun_hosts_test $case: all passed" || echo "kolorun_hosts_test $case: $fails failed"
exit $((fails > 0))
