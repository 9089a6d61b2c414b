#!/bin/sh
# Runs kernels_bench next to the memory-bandwidth anchor and writes both, with
# the machine, to stdout:  bench/kernels/run.sh BUILD_DIR > bench/results/kernels-$(date +%F).txt
set -eu
build=${1:?usage: run.sh BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
membw_src=${MEMBW_SRC:-$here/../../../shared/anchors/membw.c}
membw=$(mktemp)
gcc -O3 -march=native "$membw_src" -o "$membw"

echo "# kolo kernels benchmark, $(date -u '+%Y-%m-%d %H:%M UTC'), kernels at $(git -C "$here" log -1 --format=%h -- ../../src/kernels)"
echo "# machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB"
echo "# load average at start: $(cut -d' ' -f1-3 /proc/loadavg) (shared machine)"
echo
echo "## membw.c (best of 10 each), before"
"$membw"; "$membw"; "$membw"
echo
echo "## kernels_bench (median of 5 repetitions)"
"$build/kernels_bench" --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
  --benchmark_min_time=0.2 2>&1 | grep -v '_mean\|_stddev\|_cv'
echo
echo "## membw.c (best of 10 each), after"
"$membw"; "$membw"; "$membw"
echo "# load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
rm -f "$membw"
