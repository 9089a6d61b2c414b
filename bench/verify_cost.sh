#!/usr/bin/env bash
# What mismatch detection costs: allreduce f32 in place, 8 B latency and
# 64 MiB busbw on 2 ranks, with the fingerprint check on (the default) and
# off (KOLO_VERIFY_CALLS=0), interleaved over ROUNDS rounds; medians.
#   bench/verify_cost.sh [BUILD_DIR]   (default build/); writes bench/results/verify-cost-<host>-<date>.md
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" && pwd)
ROUNDS=${ROUNDS:-5}
NP=${NP:-2}
OUT=${OUT:-$ROOT/bench/results/verify-cost-$(hostname 2>/dev/null || echo dev)-$(date +%F).md}
run() {  # transport verify bytes -> "time_us busbw"
  KOLO_TRANSPORT=$1 KOLO_VERIFY_CALLS=$2 "$BUILD/tools/kolorun/kolorun" -np "$NP" \
    "$BUILD/tools/kolo-bench/kolo-bench" -c allreduce --sizes "$3" --inplace --anchor-format \
    -n "$4" -w 20 --time-budget 0 | awk '/kolo n=/ { for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } print v["time_us"], v["busbw_GBps"] }'
}
median() { sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for transport in shm tcp; do
  for ((r = 0; r < ROUNDS; r++)); do
    for v in 1 0; do
      run $transport $v 8 50000 | awk '{print $1}' >> "$tmp/$transport.lat.$v"
      run $transport $v 67108864 20 | awk '{print $2}' >> "$tmp/$transport.bw.$v"
    done
  done
done
{
  echo "# Cost of mismatch detection (fingerprint per collective)"
  echo
  echo "Machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load before: $load_before, after: $(cut -d' ' -f1-3 /proc/loadavg)."
  echo "Commit: $(git -C "$ROOT" rev-parse --short HEAD). $NP ranks, allreduce f32 sum in place, $ROUNDS interleaved rounds"
  echo "(8 B: 50000 iterations per round; 64 MiB: 20). Command: \`bench/verify_cost.sh\`."
  echo "Medians, and the best round of each (latency: lowest; busbw: highest): on a shared 2-core VM"
  echo "a round lands in a fast or a slow mode (vCPU placement), and interference only slows a"
  echo "round, so the best rounds compare the code itself. Cost: positive means the check is slower."
  echo
  echo "| transport | statistic | 8 B latency, check on (µs) | check off (µs) | cost | 64 MiB busbw, check on (GB/s) | check off (GB/s) | cost |"
  echo "|---|---|---|---|---|---|---|---|"
  for transport in shm tcp; do
    for stat in median best; do
      if [ $stat == median ]; then
        lon=$(median < "$tmp/$transport.lat.1"); loff=$(median < "$tmp/$transport.lat.0")
        bon=$(median < "$tmp/$transport.bw.1"); boff=$(median < "$tmp/$transport.bw.0")
      else
        lon=$(sort -g "$tmp/$transport.lat.1" | head -1); loff=$(sort -g "$tmp/$transport.lat.0" | head -1)
        bon=$(sort -g "$tmp/$transport.bw.1" | tail -1); boff=$(sort -g "$tmp/$transport.bw.0" | tail -1)
      fi
      awk -v t=$transport -v s=$stat -v lon=$lon -v loff=$loff -v bon=$bon -v boff=$boff 'BEGIN {
        printf "| %s | %s | %.2f | %.2f | %+.1f %% | %.2f | %.2f | %+.1f %% |\n", t, s, lon, loff, (lon / loff - 1) * 100, bon, boff, (1 - bon / boff) * 100 }'
    done
  done
} | tee "$OUT"
