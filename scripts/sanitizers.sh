#!/usr/bin/env bash
# The sanitizer stages of CI: builds the core (no LibTorch) with
# AddressSanitizer+UBSan into build-asan and with ThreadSanitizer into
# build-tsan, runs the core tests under each, and exits non-zero if anything
# failed (a sanitizer report fails the process it is in: the test fails).
#
#   scripts/sanitizers.sh             both stages
#   scripts/sanitizers.sh asan        ASan+UBSan only
#   scripts/sanitizers.sh tsan        TSan only
#   scripts/sanitizers.sh build       both builds, no test (.ci/run starts it
#                                     ahead, at idle priority, beside the tests)
#
# What runs (chosen to stay under ~20 minutes on a loaded 2-core machine,
# builds included; ccache makes later runs mostly test time):
#   ASan+UBSan  kernels_tests, rendezvous_tests (all), launcher tests (all),
#               collectives at 1, 2 and 3 ranks on shm and tcp (without the
#               64 MiB --large sizes), the mismatch test, the bad input table
#               (1 rank and 3 ranks on both transports), fault injection
#               (6 rank kills alternating shm/tcp, 2 between collectives,
#               1 frozen rank, 2 kills of kolorun), the gradient reducer at
#               2 and 3 ranks (its layout moving under gradient views: the
#               readiness rebuild, autotune's re-layouts).
#   TSan        rendezvous_tests (the store's poll thread against client
#               threads), the collectives at 2 and 3 ranks on both transports
#               (blocking and async calls: the engine's worker thread against
#               the caller), the bad input table at 1 rank and at 3 ranks
#               on shm, 2 rank kills (shm, tcp) during async allreduces (the
#               failure path), the gradient reducer at 2 ranks (its lock
#               against the engine's completions), kolorun itself (its store
#               thread) in all of them.
# Not here: the 4- and 8-rank collective runs, the 64 MiB sizes and the
# launcher-variable discovery test (scripts/test.sh runs them unsanitized).
# Both stages build kolo without its GPU parts (-DKOLO_CUDA=OFF): CI's build
# without CUDA, whose tests must pass as well (the GPU code's host side is
# exercised by scripts/test.sh's build, and its GPU side only on a GPU).
#
# TSan sees one process: the shared-memory transport's cross-process
# synchronisation (atomics and futexes in a shared segment) is checked only
# as far as each process's own threads go.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
stages=${1:-all}

failed=()
t_start=$SECONDS

# step NAME CMD...: runs one step, prints its time and result, remembers failures.
step() {
  local name=$1
  shift
  local t0=$SECONDS
  echo "=== $name"
  if "$@"; then
    echo "--- ok: $name ($((SECONDS - t0)) s)"
  else
    echo "--- FAILED: $name ($((SECONDS - t0)) s)"
    failed+=("$name")
  fi
}

# The build's output goes to DIR/sanitizer-build.log (its tail is shown on failure).
configure_and_build() {  # DIR SANITIZER TARGETS...
  local dir=$1 san=$2
  shift 2
  mkdir -p "$dir"
  # -O1: the sanitizers' usual level; no NDEBUG, so assertions are on too.
  # -g1: line tables, all a report's stack needs; full -g took ~40 % longer
  # to compile (hosts_test.cc under ASan: 52 s vs 37 s on the dev VM).
  if cmake -S . -B "$dir" -G Ninja -DKOLO_WITH_TORCH=OFF -DKOLO_CUDA=OFF -DKOLO_SANITIZE="$san" -DKOLO_BUILD_TOOLS=ON \
      -DKOLO_BUILD_TESTS=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" \
      -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1" > "$dir/sanitizer-build.log" 2>&1 &&
    ninja -C "$dir" "$@" >> "$dir/sanitizer-build.log" 2>&1; then
    return 0
  fi
  tail -40 "$dir/sanitizer-build.log"
  return 1
}

# Each stage's build (also what `build` builds ahead).
build_asan() {
  step "asan: build" configure_and_build build-asan address kolorun kernels_tests rendezvous_tests \
    launcher_tests kolo_test_rank check_collectives kolo_mismatch kolo_fault_rank kolo_bad_input_test \
    check_reducer check_autotune
}
build_tsan() {
  step "tsan: build" configure_and_build build-tsan thread kolorun rendezvous_tests check_collectives \
    kolo_bad_input_test kolo_fault_rank check_reducer
}

# Collectives under kolorun without the --large sizes: RANKS TRANSPORT DIR.
collectives() {
  KOLO_TRANSPORT=$2 "$3/tools/kolorun/kolorun" -np "$1" --timeout 900 \
    "$3/tests/collectives/check_collectives" 2>&1 | tail -3
  return "${PIPESTATUS[0]}"
}

# The gradient reducer's tests (tests/reducer): RANKS DIR; DIR.
reducer() {
  "$2/tools/kolorun/kolorun" -np "$1" --timeout 600 "$2/tests/reducer/check_reducer" 2>&1 | tail -3
  return "${PIPESTATUS[0]}"
}
autotune() {
  KOLO_AUTOTUNE=1 KOLO_AUTOTUNE_WARMUP_STEPS=1 KOLO_AUTOTUNE_STEPS=2 KOLO_AUTOTUNE_LOG="$1/autotune.csv" \
    "$1/tools/kolorun/kolorun" -np 2 --timeout 600 "$1/tests/reducer/check_autotune" 2>&1 | tail -3
  return "${PIPESTATUS[0]}"
}

bad_input_np3() {  # DIR TRANSPORT
  KOLO_TRANSPORT=$2 "$1/tools/kolorun/kolorun" -np 3 --timeout 500 "$1/tests/failures/kolo_bad_input_test" \
    > "$1/bad_input_np3.log" 2>&1
  local rc=$?
  grep -E "PASSED|FAILED|Failure|Sanitizer|runtime error" "$1/bad_input_np3.log" | head -40
  return $rc
}

ctest_in() {  # DIR CTEST-ARGS...
  local dir=$1
  shift
  (cd "$dir" && ctest --output-on-failure --timeout 900 "$@")
}

run_asan() {
  local B=build-asan
  export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:abort_on_error=0:detect_stack_use_after_return=0
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  build_asan
  [[ " ${failed[*]} " == *" asan: build "* ]] && return
  step "asan: kernels_tests" $B/tests/kernels/kernels_tests --gtest_brief=1
  step "asan: rendezvous_tests" $B/tests/rendezvous/rendezvous_tests --gtest_brief=1
  step "asan: launcher tests" ctest_in $B -L launcher
  for np in 1 2 3; do
    for t in shm tcp; do step "asan: collectives np$np $t" collectives $np $t $B; done
  done
  for np in 2 3; do step "asan: reducer np$np" reducer $np $B; done
  step "asan: autotune" autotune $B
  step "asan: mismatch" tests/collectives/mismatch_test.sh $B/tools/kolorun/kolorun $B/tests/collectives/kolo_mismatch
  step "asan: bad input np1" $B/tests/failures/kolo_bad_input_test --gtest_brief=1
  for t in shm tcp; do step "asan: bad input np3 $t" bad_input_np3 $B $t; done
  step "asan: fault rank" tests/failures/fault_test.sh $B/tools/kolorun/kolorun $B/tests/failures/kolo_fault_rank rank 6
  step "asan: fault between" tests/failures/fault_test.sh $B/tools/kolorun/kolorun $B/tests/failures/kolo_fault_rank between 2
  step "asan: fault stopped" tests/failures/fault_test.sh $B/tools/kolorun/kolorun $B/tests/failures/kolo_fault_rank stopped 1
  step "asan: fault launcher" tests/failures/fault_test.sh $B/tools/kolorun/kolorun $B/tests/failures/kolo_fault_rank launcher 2
  unset ASAN_OPTIONS UBSAN_OPTIONS
}

run_tsan() {
  local B=build-tsan
  export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
  build_tsan
  [[ " ${failed[*]} " == *" tsan: build "* ]] && return
  # TSan maps its shadow at fixed addresses; with more ASLR bits than it
  # expects a process dies at start ("unexpected memory mapping"): run
  # without address randomisation where that is possible.
  local norand=()
  if setarch "$(uname -m)" -R true 2>/dev/null; then norand=(setarch "$(uname -m)" -R); fi
  step "tsan: rendezvous_tests" "${norand[@]}" $B/tests/rendezvous/rendezvous_tests --gtest_brief=1
  for np in 2 3; do
    for t in shm tcp; do step "tsan: collectives np$np $t" "${norand[@]}" bash -c "$(declare -f collectives); collectives $np $t $B"; done
  done
  step "tsan: reducer np2" "${norand[@]}" bash -c "$(declare -f reducer); reducer 2 $B"
  step "tsan: bad input np1" "${norand[@]}" $B/tests/failures/kolo_bad_input_test --gtest_brief=1
  step "tsan: bad input np3 shm" "${norand[@]}" bash -c "$(declare -f bad_input_np3); bad_input_np3 $B shm"
  # A rank killed while the survivors' engine threads run async allreduces:
  # the failure path (abort, error posting, queued work failing) under TSan.
  step "tsan: fault rank" "${norand[@]}" tests/failures/fault_test.sh $B/tools/kolorun/kolorun \
    $B/tests/failures/kolo_fault_rank rank 2
  unset TSAN_OPTIONS
}

case $stages in
  all)
    # The two stages at once, each into a log of its own (printed whole when
    # both are done): one's tests, which mostly wait (failure deadlines,
    # kolorun), overlap the other's build.
    logs=$(mktemp -d)
    trap 'rm -rf "$logs"' EXIT
    "$0" asan > "$logs/asan" 2>&1 &
    asan=$!
    "$0" tsan > "$logs/tsan" 2>&1 &
    tsan=$!
    wait $asan || failed+=("the asan stage")
    wait $tsan || failed+=("the tsan stage")
    cat "$logs/asan" "$logs/tsan"
    ;;
  asan) run_asan ;;
  tsan) run_tsan ;;
  build)
    build_asan
    build_tsan
    ;;
  *) echo "usage: scripts/sanitizers.sh [asan|tsan|build]"; exit 2 ;;
esac

echo "=== sanitizers: $((SECONDS - t_start)) s in all"
if [ ${#failed[@]} -gt 0 ]; then
  printf 'FAILED: %s\n' "${failed[@]}"
  exit 1
fi
echo "all sanitizer steps passed"
