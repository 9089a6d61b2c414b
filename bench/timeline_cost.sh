#!/usr/bin/env bash
# What the timeline costs: on (KOLO_TIMELINE set) against off, on 2 ranks over
# shared memory: allreduce f32 in place, 8 B latency and 64 MiB busbw
# (kolo-bench), and the MLP training step of kolo.torch's DistributedOptimizer
# (bench/python/timeline_step.py); interleaved over ROUNDS rounds, the order
# of on/off alternating; medians.
#   bench/timeline_cost.sh [BUILD_DIR]   (default build/); writes bench/results/timeline-cost-<host>-<date>.md
# MACHINE="dev VM, 2 cores, shared/loaded" names the machine in the table.
# BASELINE=DIR: also runs, off, a build of the code before the timeline
# existed, interleaved with the others ("off" against "today").
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" && pwd)
ROUNDS=${ROUNDS:-5}
NP=${NP:-2}
STEPS=${STEPS:-20}
MACHINE=${MACHINE:-$(hostname)}
OUT=${OUT:-$ROOT/bench/results/timeline-cost-$(hostname 2>/dev/null || echo dev)-$(date +%F).md}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
BASELINE=${BASELINE:+$(cd "$BASELINE" && pwd)}
B=$BUILD  # the build a mode runs: BASELINE for "base", else BUILD
with() {  # on|off|base cmd...: runs cmd under kolorun with the timeline on or off
  local mode=$1; shift
  if [ "$mode" = on ]; then
    KOLO_TRANSPORT=shm KOLO_TIMELINE="$tmp/t.json" "$B/tools/kolorun/kolorun" -np "$NP" "$@"
  else
    KOLO_TRANSPORT=shm "$B/tools/kolorun/kolorun" -np "$NP" "$@"
  fi
}
bench() {  # mode bytes iters -> "time_us busbw"
  with "$1" "$B/tools/kolo-bench/kolo-bench" -c allreduce --sizes "$2" --inplace --anchor-format \
    -n "$3" -w 20 --time-budget 0 | awk '/kolo n=/ { for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } print v["time_us"], v["busbw_GBps"] }'
}
# STEP=python (default): kolo.torch's MLP step (needs the build's kolo._C and
# Debian's torch); STEP=fashion_mnist: the C++ trainer's MLP step
# (--bench-steps, batch 32 per rank, 1 thread; DATA: its --data directory),
# where no kolo._C is built.
STEP=${STEP:-python}
step() {
  if [ "$STEP" = fashion_mnist ]; then
    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 with "$1" "$B/examples/fashion_mnist/fashion_mnist" --model mlp \
      --batch 32 --threads 1 --bench-steps "$STEPS" ${DATA:+--data "$DATA"} | sed -n 's/.*step_ms=\([0-9.]*\).*/\1/p'
  else
    PYTHONPATH="$B/python" with "$1" /usr/bin/python3 "$ROOT/bench/python/timeline_step.py" "$STEPS" \
      | sed -n 's/.*step_ms=//p'
  fi
}
median() { sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for ((r = 0; r < ROUNDS; r++)); do
  if ((r % 2)); then order="off on"; else order="on off"; fi
  [ -n "$BASELINE" ] && order="$order base"
  for m in $order; do
    if [ $m = base ]; then B=$BASELINE; else B=$BUILD; fi
    bench $m 8 20000 | awk '{print $1}' >> "$tmp/lat.$m"
    bench $m 67108864 10 | awk '{print $2}' >> "$tmp/bw.$m"
    step $m >> "$tmp/step.$m"
    [ $m = on ] && ls -l "$tmp/t.json" | awk '{print $5}' >> "$tmp/size"
  done
  echo "round $((r + 1))/$ROUNDS done" >&2
done
{
  echo "# Cost of the timeline (KOLO_TIMELINE on against off)"
  echo
  echo "Machine: $MACHINE ($(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores); load before: $load_before, after: $(cut -d' ' -f1-3 /proc/loadavg)."
  echo "Commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo "${COMMIT:-unknown}"). $NP ranks on shared memory, $ROUNDS interleaved rounds (on/off order alternating);"
  if [ "$STEP" = fashion_mnist ]; then
    echo "allreduce f32 sum in place (8 B: 20000 iterations per run, 64 MiB: 10), and fashion_mnist's MLP step (kolo_torch,"
    echo "batch 32 per rank, 1 thread, --bench-steps $STEPS). Command: \`STEP=fashion_mnist bench/timeline_cost.sh\`."
  else
    echo "allreduce f32 sum in place (8 B: 20000 iterations per run, 64 MiB: 10), and the MLP step (784-4096-4096-10,"
    echo "batch 64 per rank, 1 torch thread, DistributedOptimizer; median of $STEPS steps per run). Command: \`bench/timeline_cost.sh\`."
  fi
  echo "Medians of the runs. Cost: positive means the timeline is slower. Trace file of the last on-run (MLP job): $(tail -1 "$tmp/size") bytes."
  echo
  echo "| measure | on | off | cost |"
  echo "|---|---|---|---|"
  awk -v on="$(median < "$tmp/lat.on")" -v off="$(median < "$tmp/lat.off")" 'BEGIN { printf "| 8 B allreduce latency (µs) | %.2f | %.2f | %+.1f %% |\n", on, off, (on / off - 1) * 100 }'
  awk -v on="$(median < "$tmp/bw.on")" -v off="$(median < "$tmp/bw.off")" 'BEGIN { printf "| 64 MiB allreduce busbw (GB/s) | %.2f | %.2f | %+.1f %% |\n", on, off, (1 - on / off) * 100 }'
  awk -v on="$(median < "$tmp/step.on")" -v off="$(median < "$tmp/step.off")" 'BEGIN { printf "| MLP training step (ms) | %.2f | %.2f | %+.1f %% |\n", on, off, (on / off - 1) * 100 }'
  echo
  echo "Every run (on | off):"
  for k in lat bw step; do echo "- $k: $(paste -sd' ' "$tmp/$k.on") | $(paste -sd' ' "$tmp/$k.off")"; done
  if [ -n "$BASELINE" ]; then
    echo
    echo "Off against the build before the timeline (BASELINE, run off in every round): medians"
    echo "8 B $(median < "$tmp/lat.base") µs, 64 MiB $(median < "$tmp/bw.base") GB/s, step $(median < "$tmp/step.base") ms."
    for k in lat bw step; do echo "- $k, baseline: $(paste -sd' ' "$tmp/$k.base")"; done
  fi
} | tee "$OUT"
