#!/bin/bash
# The timeline end to end: timeline_test.sh KOLORUN TIMELINE_PROG MODE
#   shm        2 ranks on shared memory, rank 1 sleeps before one collective
#   hier       2 emulated hosts x 2 ranks (hierarchical), rank 2 sleeps
#   start_stop start/stop three times in one job: three files
#   killed     the job killed while recording: each rank's snapshot parses,
#              and kolo-trace merge makes the one file from them
#   bad_path   an unwritable file is an error naming it (kolorun, KOLO_TIMELINE)
#   torch      kolo_torch's DistributedOptimizer marks (PROG: torch_rank_prog),
#              2 ranks, overlapped and not
set -u
kolorun=$1 prog=$2 mode=$3
here=$(cd "$(dirname "$0")" && pwd)
check="python3 $here/check_trace.py"
trace="python3 $here/../../tools/kolo-trace/kolo-trace"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
die() { echo "timeline_test $mode: $*" >&2; exit 1; }

case $mode in
shm)
  KOLO_TRANSPORT=shm "$kolorun" -np 2 --timeout 120 --timeline-filename "$dir/t.json" \
      "$prog" --sleep-rank 1 || die "the job failed"
  $check "$dir/t.json" --ranks 2 --transport shm --straggler 1 || die "bad trace"
  ls "$dir"/t.json.rank* 2>/dev/null && die "snapshots left after a clean end"
  out=$($trace report "$dir/t.json") || die "kolo-trace report failed"
  echo "$out"
  echo "$out" | grep -q "arrived last" || die "no report"
  ;;
hier)
  KOLO_HIERARCHICAL=1 "$kolorun" -np 4 --timeout 180 --timeline-filename "$dir/t.json" \
      "$here/../collectives/as_host.sh" "a a b b" "$prog" --sleep-rank 2 || die "the job failed"
  $check "$dir/t.json" --ranks 4 --transport hier --straggler 2 || die "bad trace"
  ;;
start_stop)
  "$kolorun" -np 2 --timeout 120 "$prog" --start-stop "$dir/s" 3 --sleep-rank 0 || die "the job failed"
  for i in 0 1 2; do
    $check "$dir/s.$i" --ranks 2 --transport shm --straggler 0 || die "bad trace $i"
  done
  ;;
killed)
  KOLO_TIMELINE_FLUSH_MS=100 "$kolorun" -np 2 --timeout 6 --grace-period 1 --timeline-filename "$dir/t.json" \
      "$prog" --sleep-rank 1 --linger-s 60
  rc=$?
  [ "$rc" = 124 ] || die "expected kolorun's timeout (124), got $rc"
  python3 -c "import json,sys; json.load(open(sys.argv[1]))" "$dir/t.json" || die "t.json does not parse"
  for r in 0 1; do
    python3 -c "import json,sys; json.load(open(sys.argv[1]))" "$dir/t.json.rank$r.json" \
        || die "snapshot of rank $r does not parse"
  done
  $trace merge "$dir/t.json" || die "kolo-trace merge failed"
  $check "$dir/t.json" --ranks 2 --transport shm --straggler 1 || die "bad merged trace"
  ;;
bad_path)
  out=$("$kolorun" -np 2 --timeline-filename /nonexistent/dir/t.json "$prog" 2>&1)
  [ $? = 2 ] || die "kolorun accepted an unwritable directory: $out"
  echo "$out" | grep -q "/nonexistent/dir" || die "kolorun's error does not name the directory: $out"
  out=$(KOLO_TIMELINE=/nonexistent/dir/t.json "$kolorun" -np 2 --timeout 60 "$prog" 2>&1)
  [ $? != 0 ] || die "a rank accepted an unwritable KOLO_TIMELINE: $out"
  echo "$out" | grep -q "timeline: cannot write /nonexistent/dir/t.json" || die "the error does not name the file: $out"
  echo "$out" | grep -m1 "cannot write"
  ;;
torch)
  # Overlap::Auto with a 1-step trial: steps 1-2 overlapped (warm-up), then one
  # step each way, so both places that issue buckets (the gradient hook and
  # synchronize()) are seen.
  out=$(KOLO_TRANSPORT=shm "$kolorun" -np 2 --timeout 120 --timeline-filename "$dir/t.json" \
      "$prog" equiv --steps 4 --small-buckets --overlap-trials 1 --print-overlap 2>&1) || die "the job failed: $out"
  modes=$(echo "$out" | sed -n 's/.*rank 0: overlap \([-+]*\),.*/\1/p')
  case $modes in *+*-* | *-*+*) ;; *) die "expected overlapped and plain steps, got '$modes': $out" ;; esac
  python3 "$here/check_optimizer_trace.py" "$dir/t.json" --ranks 2 --modes "$modes" --min-buckets 3 \
      || die "bad trace"
  ;;
*) die "unknown mode" ;;
esac
echo "timeline_test $mode: ok"
