#!/usr/bin/env bash
# Real Slurm (munge, slurmctld, two slurmd) on two emulated hosts h0, h1; one case per run:
#   slurm_test.sh srun          srun -N 2 -n 4 kolo-bench: 4 collectives, results verified, tasks
#                               placed on both nodes
#   slurm_test.sh srun-fail     rank 3 is SIGKILLed in a long kolo-bench run: with srun -K srun
#                               ends the step, names task 3, exits non-zero; without -K every
#                               survivor fails with kolo's error naming rank 3; nothing left
#   slurm_test.sh sbatch        examples/slurm/fashion_mnist.sbatch trains one short epoch on two
#                               nodes: its log shows 4 ranks and the accuracy, the checkpoint loads
#   slurm_test.sh sbatch-fail   the same job with rank 1 given a missing data directory: the job
#                               fails, its log names rank 1 and the missing file
#   slurm_test.sh elastic       examples/slurm/elastic.sbatch runs the elastic C++ worker on both
#                               nodes (kolorun on h0, h1's workers through srun --overlap); every
#                               process of h1 (slurmd too) is killed mid-run: the job re-forms on
#                               h0's 2 workers and finishes, every sum exact, rank 0's steps once
# Needs root (skips with 77 otherwise) and KOLO_TEST_BUILD_DIR (set by ctest).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
case=${1:?usage: slurm_test.sh srun|srun-fail|sbatch|sbatch-fail}
B=${KOLO_TEST_BUILD_DIR:-$REPO/build}
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
BENCH=$B/tools/kolo-bench/kolo-bench
TRAIN=$B/examples/fashion_mnist/fashion_mnist
[ -x "$BENCH" ] || { echo "FAIL: no $BENCH"; exit 1; }
if [[ $case == sbatch* ]] && [ ! -x "$TRAIN" ]; then
  echo "SKIP: $TRAIN not built (LibTorch not found)"; exit 77
fi

source "$HERE/hosts.sh"
source "$HERE/slurm_cluster.sh"
WORK=$(mktemp -d /tmp/slurm-test.XXXXXX)
kh_on_down "rm -rf '$WORK'"
kh_up 2 || exit 1
ks_up || exit 1

fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
ok() { echo "ok   $*"; }
expect() {  # expect "what" COND...: a test condition
  local what=$1; shift
  if "$@"; then ok "$what"; else fail "$what"; fi
}

# Nothing of a job may outlive it, on any host.
no_leftovers() {
  local left
  left=$(ks_leftovers 'kolo-bench|fashion_mnist|slurmstepd')
  [ -z "$left" ] || { echo "left running: $left"; return 1; }
}

# Wait (≤ 10 s) for slurmstepd and the tasks to go after a job ended.
settle() { for _ in $(seq 1 40); do no_leftovers >/dev/null && return 0; sleep 0.25; done; return 0; }

# tasks_that "STATUS" FILE: the task ids srun reports with that status ("srun: error: h0: tasks
# 0-1: Exited with exit code 1"), sorted, space separated.
tasks_that() {
  sed -n "s/^srun: error: [^:]*: tasks\{0,1\} \([0-9,-]*\): $1\$/\1/p" "$2" | tr ',' '\n' |
    awk -F- '{ for (t = $1; t <= ($2 == "" ? $1 : $2); t++) print t }' | sort -n | tr '\n' ' ' | sed 's/ $//'
}
eq() { [ "$1" = "$2" ] || { echo "expected '$2', got '$1'"; return 1; }; }

# kolo-bench's table: one block per collective, "4 ranks", one row per size, #wrong all 0.
check_bench() {
  local out=$1 c rows bad
  for c in allreduce broadcast allgather reduce_scatter; do
    grep -q "^# kolo-bench $c: 4 ranks" "$out" || { echo "no '$c: 4 ranks' header"; return 1; }
  done
  rows=$(awk '$1 ~ /^[0-9]+$/ && NF == 9' "$out" | wc -l)
  [ "$rows" = 12 ] || { echo "expected 12 result rows (4 collectives x 3 sizes), got $rows"; return 1; }
  bad=$(awk '$1 ~ /^[0-9]+$/ && NF == 9 && $9 != 0' "$out")
  [ -z "$bad" ] || { echo "rows with wrong results: $bad"; return 1; }
  [ "$(grep -c '^# all results correct' "$out")" = 4 ] || { echo "missing 'all results correct'"; return 1; }
}

case $case in
srun)
  place=$(ks_exec srun -N 2 -n 4 --overcommit -l hostname | sort | tr '\n' ' ')
  expect "srun places 2 tasks on each node ($place)" [ "$place" = "0: h0 1: h0 2: h1 3: h1 " ]
  ks_exec timeout 120 srun -N 2 -n 4 --overcommit -K "$BENCH" -c allreduce,broadcast,allgather,reduce_scatter \
    --sizes "8 4100 1000004" -n 3 -w 1 --time-budget 0 >"$WORK/bench.out" 2>"$WORK/bench.err"
  rc=$?
  expect "srun kolo-bench exits 0 (rc $rc)" [ "$rc" = 0 ]
  expect "kolo-bench across both nodes: every result right" check_bench "$WORK/bench.out"
  # Two ranks per node: kolo must see two hosts (shared memory within each, TCP between).
  expect "kolo runs hierarchically on 2 nodes x 2" grep -q "^# kolo-bench allreduce: 4 ranks, transport hier" "$WORK/bench.out"
  # f16 goes through a different reduction path (f32 accumulation).
  ks_exec timeout 120 srun -N 2 -n 4 --overcommit -K "$BENCH" -c allreduce -d f16 --sizes "6 1000002" \
    -n 2 -w 1 --time-budget 0 >"$WORK/f16.out" 2>&1
  rc=$?
  good=$(awk '$1 ~ /^[0-9]+$/ && NF == 9 && $9 == 0' "$WORK/f16.out" | wc -l)
  expect "srun kolo-bench f16: 2 right rows (rc $rc, $good rows)" [ "$rc" = 0 -a "$good" = 2 ]
  [ "$fails" = 0 ] || cat "$WORK/bench.out" "$WORK/bench.err" "$WORK/f16.out"
  ;;
srun-fail)
  start=$(date +%s)
  ks_exec timeout 120 srun -N 2 -n 4 --overcommit -K -l bash -c '
    if [ "$SLURM_PROCID" = 3 ]; then (sleep 3; kill -KILL $$) & fi
    exec "$0" -b 1M -e 1M -n 100000 -w 1 --time-budget 0' "$BENCH" >"$WORK/out" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  expect "srun exits non-zero when a rank dies (rc $rc)" [ "$rc" != 0 -a "$rc" != 124 ]
  expect "srun names the dead task on its node" grep -q "srun: error: h1: task 3: Killed" "$WORK/out"
  expect "the step ends within 30 s ($secs s)" [ "$secs" -lt 30 ]
  settle
  expect "nothing left on either host" no_leftovers
  [ "$fails" = 0 ] || cat "$WORK/out"

  # Without -K it is kolo that ends the survivors: each fails with an error naming rank 3.
  start=$(date +%s)
  ks_exec timeout 120 srun -N 2 -n 4 --overcommit -l bash -c '
    if [ "$SLURM_PROCID" = 3 ]; then (sleep 3; kill -KILL $$) & fi
    exec "$0" -b 1M -e 1M -n 100000 -w 1 --time-budget 0' "$BENCH" >"$WORK/out2" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  expect "without -K: srun exits non-zero (rc $rc)" [ "$rc" != 0 -a "$rc" != 124 ]
  for r in 0 1 2; do
    expect "without -K: rank $r fails with kolo's error naming rank 3" grep -q "^$r: .*rank 3" "$WORK/out2"
  done
  expect "without -K: the survivors exit 1 themselves" eq "$(tasks_that "Exited with exit code 1" "$WORK/out2")" "0 1 2"
  expect "without -K: the step ends within 30 s ($secs s)" [ "$secs" -lt 30 ]
  settle
  expect "without -K: nothing left on either host" no_leftovers
  [ "$fails" = 0 ] || cat "$WORK/out2"
  ;;
sbatch)
  cd "$WORK" || exit 1
  # A short run: 8192 training samples, one epoch, a short warm-up.
  KOLO_TRAIN=$TRAIN ks_exec timeout 300 sbatch --wait --parsable "$REPO/examples/slurm/fashion_mnist.sbatch" \
    --train-limit 8192 --warmup 8 --epochs 1 >"$WORK/sbatch.out" 2>&1
  rc=$?
  job=$(head -n 1 "$WORK/sbatch.out")
  log=$WORK/fashion_mnist-$job.log
  expect "sbatch --wait exits 0 (rc $rc)" [ "$rc" = 0 ]
  expect "the job log exists ($log)" [ -s "$log" ]
  expect "the log shows 4 ranks on h[0-1], hierarchical" eval "grep -q 'on h\[0-1\]: 4 ranks, 2 per node' '$log' && grep -q '^0: fashion_mnist: cnn, 4 ranks (hier)' '$log'"
  acc=$(sed -n 's/^0: done: test accuracy \([0-9.]*\)%.*/\1/p' "$log")
  expect "the job trained: test accuracy ${acc:-none}% > 50%" awk -v a="${acc:-0}" 'BEGIN { exit !(a > 50) }'
  expect "the checkpoint exists" [ -s "$WORK/fashion_mnist.ckpt" ]
  # The checkpoint loads (model, optimizer, sampler) and is at the end of epoch 1.
  resume=$("$TRAIN" --checkpoint "$WORK/fashion_mnist.ckpt" --resume --epochs 1 --no-progress 2>&1)
  expect "the checkpoint resumes at epoch 1 ($resume)" grep -q "nothing to do: the checkpoint is at epoch 1 of 1" <<<"$resume"
  settle
  expect "nothing left on either host" no_leftovers
  echo "--- $log"; cat "$log"
  [ "$fails" = 0 ] || { cat "$WORK/sbatch.out"; ks_logs; }
  ;;
sbatch-fail)
  cd "$WORK" || exit 1
  cat > "$WORK/train.sh" <<EOF
#!/bin/bash
# rank 1 gets a data directory that does not exist
if [ "\$SLURM_PROCID" = 1 ]; then exec "$TRAIN" "\$@" --data "$WORK/no-such-dir"; fi
exec "$TRAIN" "\$@"
EOF
  chmod +x "$WORK/train.sh"
  start=$(date +%s)
  KOLO_TRAIN=$WORK/train.sh ks_exec timeout 300 sbatch --wait --parsable "$REPO/examples/slurm/fashion_mnist.sbatch" \
    --train-limit 4096 --epochs 1 >"$WORK/sbatch.out" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  job=$(head -n 1 "$WORK/sbatch.out")
  log=$WORK/fashion_mnist-$job.log
  expect "sbatch --wait exits non-zero (rc $rc)" [ "$rc" != 0 -a "$rc" != 124 ]
  expect "the log names rank 1 and the missing directory" grep -q "^1: .*no-such-dir" "$log"
  expect "srun names task 1" grep -q "srun: error: h0: task 1: Exited with exit code" "$log"
  expect "the job ends within 60 s ($secs s)" [ "$secs" -lt 60 ]
  expect "no checkpoint from a failed job" [ ! -e "$WORK/fashion_mnist.ckpt" ]
  settle
  expect "nothing left on either host" no_leftovers
  echo "--- $log"; cat "$log"
  [ "$fails" = 0 ] || { cat "$WORK/sbatch.out"; ks_logs; }
  ;;
elastic)
  cd "$WORK" || exit 1
  WORKER=$B/tests/elastic/kolo_elastic_worker
  [ -x "$WORKER" ] || { echo "FAIL: no $WORKER"; exit 1; }
  KOLORUN=$B/tools/kolorun/kolorun KOLO_MIN_NP=2 KOLO_ELASTIC_TIMEOUT=60 ks_exec timeout 300 \
    sbatch --wait --parsable "$REPO/examples/slurm/elastic.sbatch" "$WORKER" 400 --sleep-ms 30 \
    >"$WORK/sbatch.out" 2>&1 &
  sbatch_pid=$!
  log=
  for _ in $(seq 1 1200); do  # up to 120 s for h1's workers to be stepping
    job=$(head -n 1 "$WORK/sbatch.out" 2>/dev/null)
    [ -n "$job" ] && log=$WORK/elastic-$job.log
    [ -n "$log" ] && grep -Eq '^\[3\] step 20 gen 0 ' "$log" 2>/dev/null && break
    sleep 0.1
  done
  expect "h1's workers step in generation 0" grep -Eq '^\[3\] step 20 gen 0 rank 3 size 4 ' "$log"
  kh_kill h1   # the node fails: its workers, kolorun's agent, srun's step daemon, slurmd
  wait "$sbatch_pid"
  rc=$?
  expect "sbatch --wait exits 0 (rc $rc)" [ "$rc" = 0 ]
  expect "generation 0: 4 workers on both nodes" grep -q 'generation 0: 4 workers (h0: 0, 1; h1: 2, 3)' "$log"
  expect "h1 is lost and blacklisted" grep -Eq 'host h1 .*blacklisted|lost host h1.*blacklisted' "$log"
  expect "generation 1: h0's 2 workers" grep -q 'generation 1: 2 workers (h0: 0, 1)' "$log"
  for w in 0 1; do
    expect "worker $w finishes in generation 1" grep -Eq "^\[$w\] step 399 gen 1 rank [01] size 2 sum [0-9]+ ok" "$log"
  done
  expect "no wrong sum" eval "! grep -q WRONG '$log'"
  seq 0 399 > "$WORK/want"
  sed -n 's/^\[0\] step \([0-9]*\) gen [0-9]* rank 0 .*/\1/p' "$log" > "$WORK/got0"
  expect "rank 0's steps are 0..399, each once" cmp -s "$WORK/want" "$WORK/got0"
  settle
  left=$(for p in $(kh_pids h0); do grep -qE 'kolo_elastic_worker|kolorun' "/proc/$p/cmdline" 2>/dev/null && echo "$p"; done)
  expect "nothing of the job left on h0" [ -z "$left" ]
  echo "--- $log: the launcher's lines and the re-formations"
  grep -E '^(job|kolorun)|recovering' "$log"
  [ "$fails" = 0 ] || { echo "--- $log"; cat "$log"; cat "$WORK/sbatch.out"; ks_logs; }
  ;;
*) echo "unknown case '$case'"; exit 2 ;;
esac

[ "$fails" = 0 ] && echo "slurm_test $case: all passed" || echo "slurm_test $case: $fails failed"
exit $((fails > 0))
