#!/usr/bin/env bash
# Fuzzes what kolo parses from the network: builds the libFuzzer targets in
# fuzz/ with clang (AddressSanitizer + UBSan), runs each for a bounded time on
# its corpus in fuzz/corpus/<target>/, then minimises that corpus (libFuzzer
# -merge) so that it stays small enough to commit. Exits non-zero when a
# target finds a crash, a leak, undefined behaviour or a hang; the input that
# did it is kept as fuzz/artifacts/<target>-crash-* (replay: the target binary
# with that file as its argument).
#
#   scripts/fuzz.sh [target...]     targets: store_protocol handshake (default: both)
#   FUZZ_SECONDS   seconds each target runs, all targets at once (default 60)
#   FUZZ_BUILD     build directory (default build-fuzz)
#   FUZZ_CXX       compiler (default clang++; needs libFuzzer: libclang-rt-14-dev)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${FUZZ_SECONDS:-60}
build=${FUZZ_BUILD:-$root/build-fuzz}
cxx=${FUZZ_CXX:-clang++}
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(store_protocol handshake)

# Sources and input size limit of each target. A handshake is 184 bytes at
# most; store messages are capped well below what a seed needs to grow into.
declare -A sources=([store_protocol]="src/rendezvous/store_protocol.cc src/net/codec.cc" [handshake]="src/net/auth.cc")
declare -A max_len=([store_protocol]=2048 [handshake]=256)

flags=(-std=c++20 -O1 -g -fno-omit-frame-pointer -I"$root/include" -I"$root/src")
sanitize=(-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined)
libs=($(pkg-config --libs libsodium) -lfmt)

mkdir -p "$build" "$root/fuzz/artifacts"
cd "$root"
echo "fuzz: building with $cxx in $build"
declare -A build_pid
for t in "${targets[@]}"; do
  [ -n "${sources[$t]:-}" ] || { echo "fuzz: unknown target '$t' (store_protocol, handshake)"; exit 2; }
  $cxx "${flags[@]}" "${sanitize[@]}" "fuzz/${t}_fuzz.cc" ${sources[$t]} -o "$build/${t}_fuzz" "${libs[@]}" &
  build_pid[$t]=$!
done
for t in "${targets[@]}"; do
  wait "${build_pid[$t]}" || { echo "fuzz: cannot build $t"; exit 2; }
done
# Seeds (valid messages of every kind, written by the real encoders) where
# the corpus is missing; it is committed.
if [ ! -d fuzz/corpus/store_protocol ] || [ ! -d fuzz/corpus/handshake ]; then
  $cxx "${flags[@]}" fuzz/make_seeds.cc src/net/auth.cc src/rendezvous/store_protocol.cc src/net/codec.cc \
    -o "$build/make_seeds" "${libs[@]}" || { echo "fuzz: cannot build make_seeds"; exit 2; }
  mkdir -p fuzz/corpus/store_protocol fuzz/corpus/handshake
  "$build/make_seeds" fuzz/corpus/store_protocol fuzz/corpus/handshake
fi

failed=()
# The targets run at once (each is one single-threaded process): the stage
# takes FUZZ_SECONDS, not FUZZ_SECONDS per target, and each target still gets
# its full time.
declare -A pid new_inputs
for t in "${targets[@]}"; do
  corpus=fuzz/corpus/$t
  new_inputs[$t]=$(mktemp -d)
  echo "fuzz: $t for ${seconds}s (corpus $corpus: $(ls "$corpus" | wc -l) inputs)"
  # New inputs go to a scratch directory; the committed corpus is read only.
  "$build/${t}_fuzz" -max_total_time="$seconds" -max_len="${max_len[$t]}" -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$root/fuzz/artifacts/$t-" -print_final_stats=1 "${new_inputs[$t]}" "$corpus" \
    > "$build/$t.log" 2>&1 &
  pid[$t]=$!
done
for t in "${targets[@]}"; do
  corpus=fuzz/corpus/$t
  new=${new_inputs[$t]}
  wait "${pid[$t]}"
  rc=$?
  grep -E "^(#[0-9]+.*DONE|Done [0-9]+ runs|stat::number_of_executed_units|stat::peak_rss_mb)" "$build/$t.log" | sed "s/^/  $t: /"
  if [ $rc -ne 0 ]; then
    echo "fuzz: $t FAILED (exit $rc); the end of $build/$t.log:"
    tail -40 "$build/$t.log"
    failed+=("$t")
    rm -rf "$new"
    continue
  fi
  # Keep the smallest set of inputs that covers everything either set did,
  # plus the seeds (readable examples of every message).
  merged=$(mktemp -d)
  "$build/${t}_fuzz" -merge=1 -max_len="${max_len[$t]}" "$merged" "$corpus" "$new" > "$build/$t.merge.log" 2>&1 ||
    { echo "fuzz: merging the $t corpus failed; see $build/$t.merge.log"; failed+=("$t-merge"); }
  if [ -n "$(ls "$merged")" ]; then
    find "$corpus" -type f ! -name 'seed-*' -delete
    for f in "$merged"/*; do
      cmp -s "$f" "$corpus/$(basename "$f")" 2>/dev/null || cp "$f" "$corpus/"
    done
  fi
  echo "  $t: corpus now $(ls "$corpus" | wc -l) inputs, $(du -sk "$corpus" | cut -f1) KiB"
  rm -rf "$new" "$merged"
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: FAILED: ${failed[*]}"
  exit 1
fi
echo "fuzz: all targets ran ${seconds}s without a finding"
