#!/usr/bin/env bash
# A rank killed in the middle of GPU collectives (issue: "Failures"), on the
# host plane and on the ipc plane: the job stops within 10 s of the kill
# naming rank 1, every survivor's error names it, no process of the job is
# left and the GPU's memory is free again, and a second job on the same GPU
# right after it runs clean. Needs a GPU (exit 77 without one); DEVICE=cpu
# rehearses the same jobs on host memory (no GPU memory to check).
#   tests/gpu/kill_test.sh KOLORUN CHECK_COLLECTIVES [PYTHON]
set -uo pipefail
KOLORUN=$1 CHECK=$2 PY=${3:-python3}
HERE=$(cd "$(dirname "$0")" && pwd)
export KOLO_TEST_DEVICE=${DEVICE:-cuda}
if [ "$KOLO_TEST_DEVICE" = cuda ] && ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  echo "skipped: no GPU"; exit 77
fi
WORK=$(mktemp -d /tmp/kolo-gpu-kill.XXXXXX)
# The processes whose command line holds TEXT, from /proc: a bare machine (the
# GPU machine's image, a minbase root) may have no procps, whose missing pgrep
# would count none left.
procs_with() {  # TEXT
  local p line
  for p in /proc/[0-9]*; do
    line=$(tr '\0' ' ' < "$p/cmdline" 2>/dev/null) || continue
    [[ $line == *"$1"* ]] && echo "${p#/proc/} $line"
  done
}
trap 'procs_with "$WORK" | while read -r pid _; do kill -KILL "$pid" 2>/dev/null; done; rm -rf "$WORK"' EXIT
free_bytes() {
  if [ "$KOLO_TEST_DEVICE" = cuda ]; then "$PY" -c 'import torch; print(torch.cuda.mem_get_info()[0])'; else echo 0; fi
}
fail=0
kill_job() {  # PLANE: one killed job on that data plane, then the checks
  local plane=$1 dir=$WORK/$1 before t0 t1 rc killed took r left free
  mkdir -p "$dir"
  before=$(free_bytes)
  t0=$(date +%s.%N)
  KOLO_GPU_TRANSPORT=$plane "$KOLORUN" -np 3 --timeout 120 "$PY" "$HERE/kill_worker.py" "$dir" > "$dir/job.log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  tail -20 "$dir/job.log"
  killed=$(cat "$dir/killed_at" 2>/dev/null || echo "$t0")
  took=$(awk -v a="$killed" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  echo "kill test ($plane plane): kolorun exited with $rc, $took s after the kill"
  [ "$rc" -ne 0 ] || { echo "FAIL: the job exited 0"; fail=1; }
  awk -v t="$took" 'BEGIN { exit !(t <= 10) }' || { echo "FAIL: the job took $took s (> 10 s) to stop"; fail=1; }
  grep -q "rank 1" "$dir/job.log" || { echo "FAIL: kolorun's output does not name rank 1"; fail=1; }
  for r in 0 2; do
    if [ -f "$dir/rank.$r.err" ]; then
      echo "rank $r: $(tail -1 "$dir/rank.$r.err")"
      grep -q "rank 1" "$dir/rank.$r.err" || { echo "FAIL: rank $r's error does not name rank 1"; fail=1; }
    else
      echo "rank $r left no error (stopped by kolorun first)"
    fi
  done
  # Nothing of the job is left: no process (its command lines name $dir), and
  # the GPU's free memory is back to what it was (nvidia-smi's process list
  # is empty in a container that does not share the host's PIDs; this is not).
  left=$(procs_with "$dir")
  [ -z "$left" ] || { echo "FAIL: processes of the job still running:"; echo "$left"; fail=1; }
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    free=$(free_bytes)
    [ $((before - free)) -lt $((256 << 20)) ] && break
    sleep 0.5
  done
  [ "$KOLO_TEST_DEVICE" = cuda ] && echo "GPU free memory: $((before >> 20)) MiB before the job, $((free >> 20)) MiB after"
  [ $((before - free)) -lt $((256 << 20)) ] || { echo "FAIL: $(((before - free) >> 20)) MiB of the GPU still held after the job"; fail=1; }
  nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader 2>/dev/null
  # The next job on the same GPU, on the same plane.
  if KOLO_GPU_TRANSPORT=$plane "$KOLORUN" -np 2 --timeout 300 "$CHECK" $([ "$KOLO_TEST_DEVICE" = cuda ] && echo --cuda) \
      --filter allreduce > "$dir/next.log" 2>&1; then
    echo "next job on the same GPU ($plane plane): $(grep collectives: "$dir/next.log")"
  else
    echo "FAIL: the next job on the same GPU failed:"; tail -20 "$dir/next.log"; fail=1
  fi
}
kill_job host
kill_job ipc
[ $fail -eq 0 ] && echo "kill test: OK"
exit $fail
