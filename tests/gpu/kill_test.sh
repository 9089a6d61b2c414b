#!/usr/bin/env bash
# A rank killed in the middle of GPU collectives (issue: "Failures"): the job
# stops within 10 s of the kill naming rank 1, every survivor's error names
# it, no process of the job is left on the GPU, and a second job on the same
# GPU right after it runs clean. Needs a GPU (exit 77 without one).
#   tests/gpu/kill_test.sh KOLORUN CHECK_COLLECTIVES [PYTHON]
set -uo pipefail
KOLORUN=$1 CHECK=$2 PY=${3:-python3}
HERE=$(cd "$(dirname "$0")" && pwd)
if ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  echo "skipped: no GPU"; exit 77
fi
WORK=$(mktemp -d /tmp/kolo-gpu-kill.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
fail=0
t0=$(date +%s.%N)
"$KOLORUN" -np 3 --timeout 120 "$PY" "$HERE/kill_worker.py" "$WORK" > "$WORK/job.log" 2>&1
rc=$?
t1=$(date +%s.%N)
cat "$WORK/job.log" | tail -20
killed=$(cat "$WORK/killed_at" 2>/dev/null || echo "$t0")
took=$(awk -v a="$killed" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
echo "kill test: kolorun exited with $rc, $took s after the kill"
[ "$rc" -ne 0 ] || { echo "FAIL: the job exited 0"; fail=1; }
awk -v t="$took" 'BEGIN { exit !(t <= 10) }' || { echo "FAIL: the job took $took s (> 10 s) to stop"; fail=1; }
grep -q "rank 1" "$WORK/job.log" || { echo "FAIL: kolorun's output does not name rank 1"; fail=1; }
for r in 0 2; do
  if [ -f "$WORK/rank.$r.err" ]; then
    echo "rank $r: $(tail -1 "$WORK/rank.$r.err")"
    grep -q "rank 1" "$WORK/rank.$r.err" || { echo "FAIL: rank $r's error does not name rank 1"; fail=1; }
  else
    echo "rank $r left no error (stopped by kolorun first)"
  fi
done
# Nothing of the job holds the GPU any more (give the driver a moment).
for _ in 1 2 3 4 5 6 7 8 9 10; do
  left=$(nvidia-smi --query-compute-apps=pid,process_name --format=csv,noheader 2>/dev/null | grep -c . || true)
  [ "$left" -eq 0 ] && break
  sleep 0.5
done
nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader 2>/dev/null
[ "${left:-0}" -eq 0 ] || { echo "FAIL: $left process(es) still on the GPU after the job"; fail=1; }
# The next job on the same GPU.
if "$KOLORUN" -np 2 --timeout 300 "$CHECK" --cuda --filter allreduce > "$WORK/next.log" 2>&1; then
  echo "next job on the same GPU: $(grep collectives: "$WORK/next.log")"
else
  echo "FAIL: the next job on the same GPU failed:"; tail -20 "$WORK/next.log"; fail=1
fi
[ $fail -eq 0 ] && echo "kill test: OK"
exit $fail
