#!/usr/bin/env bash
# The GPU machine's one script (README "GPUs"): builds kolo there and runs
# everything that needs a GPU, in a few minutes, writing the logs and results
# into $OUT. Prepared and rehearsed on the development machine, where the same
# script builds and every GPU step reports "skipped: no GPU".
#
# Here, once:   bench/device/pack.sh .device        (Debian's .debs; .device is ignored)
# Rehearse:     bench/device/rehearse.sh              (in a root without Debian's -dev packages)
# There:        the device tool's run with carry [".device"] and the command
#               tests/gpu/run-on-device.sh            (timeout_s 540 leaves room for one rerun)
#
# STEPS="ctest,python" runs only the steps whose names start with those words
# (a rerun of what failed); the build always runs. Build and every step do not
# fit one call (540 s): unset STEPS runs all but bench and horovod; the second
# call, STEPS="bench,horovod", finds the build done (the machine keeps it while
# warm) and runs those; STEPS=all runs everything. Steps (each timed; a failed
# step does not stop the others; exit 1 if any failed):
#   build      kolo with its GPU parts (bench/device/build.sh: the carried .debs, torch's LibTorch)
#   cuda probe bench/gpu/cuda_probe: stream memory operations, which CUDA calls block while a
#              stream waits on a ticket word, a peer's freed allocation as its mapping sees it, the
#              costs behind a small collective (an 8-byte copy, the kernel, an IPC open)
#   nccl library  tests/gpu/nccl_library_test with torch's NCCL: loaded, and a non-blocking
#              communicator of 1 rank formed on the GPU and let go
#   ctest gpu  (one test at a time, most telling first) the CUDA reduction kernel bit for bit against the host kernels; check_collectives
#              --cuda on 2 and 4 ranks sharing the GPU, on each data plane (host, ipc; and ipc
#              in 64 KiB rounds on 3; nccl on 1 rank): every collective x dtype x op, 1 element to 256 MiB,
#              against a host reference; the caller's stream ordering; host memory on one rank
#              where the others pass CUDA memory
#   nccl       check_collectives on the nccl plane, 2 ranks (only where the machine has 2+ GPUs;
#              ctest's gpu.collectives.np1.nccl runs it on 1 rank)
#   bad input  kolo_bad_input_test on a GPU machine (a host pointer passed as CUDA memory)
#   python     kolo.torch's API, training and SyncBatchNorm workers with KOLO_TEST_DEVICE=cuda
#              (2 ranks on the host plane; the API worker on 3 ranks, and on the ipc plane)
#   process group  the "kolo" torch.distributed backend on CUDA tensors (process_group_worker.py:
#              every op against references, DDP with device_ids beside DDP on gloo, the errors;
#              2 ranks on each plane, subgroups on 3; FSDP2 against one process with the whole batch)
#   kolo_torch optimizer  torch_test's TorchCuda cases: DistributedOptimizer on CUDA, 2 ranks,
#              plain, on a side stream (with copies into .grad; fp16 wire) against the CPU baseline
#   fashion_mnist  tests/gpu/fashion_mnist_cuda.sh: the main job (kolo_torch) on the GPU, 2 ranks,
#              beside its CPU run (accuracy within a point); checkpoint + resume, bf16, SyncBatchNorm
#   examples   examples/python's Horovod and DDP programs with --device cuda, 2 ranks
#   kill       tests/gpu/kill_test.sh: a rank killed mid GPU-collective (host and ipc planes), then a clean next job
#   bench      bench/gpu/allreduce.py: kolo (each plane) vs gloo on the same CUDA tensors, 2 and 4
#              ranks (2 ranks also the ipc plane without its direct allreduce), beside the
#              device-to-device copy; bench/gpu/ddp_step.py: a DDP step of a
#              ResNet-18-sized CNN, 2 ranks, kolo (each plane) vs gloo (bench/gpu/report.py writes the tables)
#   horovod    Horovod's test/parallel/test_torch.py as one file on 2 ranks (its CUDA cases),
#              every failure explained (tests/horovod/run_horovod_tests.py --check)
# $OUT receives run.log, build.log, bench-gpu.md and bench-json.tar.gz (the tool
# brings back at most 8 files).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/build-gpu/out}
mkdir -p "$OUT"
exec > >(tee "$OUT/run.log") 2>&1
PY=${PY:-python3}
BUILD=${BUILD:-build-gpu}
DEBS=${DEBS:-.device}
export PYTHONUNBUFFERED=1
# A collective that hangs (a bug seen first on the GPU) fails after a minute,
# not after the default five: the machine's minutes are few.
export KOLO_TIMEOUT_MS=${KOLO_TIMEOUT_MS:-60000}
failed=()
wanted() {  # NAME: in STEPS (unset: every step but the second call's)
  local w steps=${STEPS:-}
  [ "$steps" = all ] && return 0
  [ -z "$steps" ] && { [[ $1 != bench* && $1 != horovod* ]]; return; }
  for w in ${steps//,/ }; do [[ $1 == "$w"* ]] && return 0; done
  return 1
}
step() {  # NAME CMD...: runs one step, prints its time and result
  local name=$1 t0=$SECONDS
  shift
  if [ "$name" != build ] && ! wanted "$name"; then
    echo "=== $name: not in STEPS"
    return
  fi
  echo "=== $name"
  "$@"
  local rc=$?
  case $rc in
    0) echo "--- ok: $name ($((SECONDS - t0)) s)" ;;
    77) echo "--- skipped: $name ($((SECONDS - t0)) s)" ;;
    *) echo "--- FAILED ($rc): $name ($((SECONDS - t0)) s)"; failed+=("$name") ;;
  esac
}

echo "machine: $(uname -srm), $(nproc) cores; python: $($PY -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__)' 2>&1)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | sed 's/^/gpu: /'
have_gpu() { $PY -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 77)'; }

build() {
  bench/device/build.sh "$DEBS" "$BUILD" check_collectives kolo_bad_input_test fingerprint_tests cuda_reduce_test \
    reduce_kernel_bench cuda_probe torch_test torch_rank_prog nccl_library_test \
    > "$OUT/build.log" 2>&1 ||
    { tail -30 "$OUT/build.log"; return 1; }
  grep -E "GPU parts|CUDA .* found" "$OUT/build.log" | head -3
  # The extension is built for $PY where its headers and pybind11 are found.
  ninja -C "$BUILD" kolo_python >> "$OUT/build.log" 2>&1 || echo "kolo._C not built (see build.log): the python steps will fail"
}
step build build
KOLORUN=$ROOT/$BUILD/tools/kolorun/kolorun
export PYTHONPATH=$ROOT/$BUILD/python${PYTHONPATH:+:$PYTHONPATH}
# The nccl plane's NCCL: the one torch's CUDA wheel carries (nvidia-nccl).
nccl=$($PY -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "..", "nvidia", "nccl", "lib", "libnccl.so.2"))' 2>/dev/null)
[ -f "$nccl" ] && export KOLO_NCCL_LIBRARY=$nccl
echo "nccl: ${KOLO_NCCL_LIBRARY:-none found beside torch}"
gpus=$($PY -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)

# First, in seconds: what the driver does that kolo relies on (bench/gpu/cuda_probe.cc).
step "cuda probe" timeout 60 "$BUILD/bench/gpu/cuda_probe"
step "fingerprint tests" "$BUILD/tests/collectives/fingerprint_tests"
# NCCL's non-blocking communicator formed on the GPU, 1 rank (transport/cuda/nccl_comm.h).
nccl_library() {
  [ -n "${KOLO_NCCL_LIBRARY:-}" ] || { echo "skipped: no NCCL beside torch"; return 77; }
  KOLO_TEST_NCCL=$KOLO_NCCL_LIBRARY "$BUILD/tests/gpu/nccl_library_test" || return 1
  have_gpu  # without one it saw only NCCL's refusal: skipped
}
step "nccl library" nccl_library
# The GPU tests one by one, most telling first, so that a call cut short by the
# machine's minutes has seen the most; a hang on the ipc plane (a sandbox
# without CUDA IPC or stream memory operations) skips its other ipc tests
# rather than spending KOLO_GPU_TEST_TIMEOUT on each.
GPU_TESTS="kernels.reduce collectives.np2.ipc collectives.np2.host collectives.np3.ipc-direct
  collectives.np1.nccl collectives.np4.ipc collectives.np4.host collectives.np3.ipc-rounds
  collectives.np3.host-parts"
ctest_gpu() {
  local t rc=0 ipc_hung= all
  # Every test labelled gpu runs: those not in GPU_TESTS after them.
  all=$(cd "$BUILD" && ctest -N -L gpu | sed -n 's/^ *Test *#[0-9]*: gpu\.//p')
  for t in $all; do [[ " $(echo $GPU_TESTS) " == *" $t "* ]] || GPU_TESTS+=" $t"; done
  for t in $GPU_TESTS; do
    if [[ -n $ipc_hung && $t == *ipc* ]]; then echo "gpu.$t: not run (gpu.$ipc_hung timed out)"; rc=1; continue; fi
    (cd "$BUILD" && ctest -R "^gpu\.${t//./\\.}\$" --no-tests=error --output-on-failure) > "$BUILD/ctest-$t.log" 2>&1
    local r=$?
    grep -E "Test +#|tests passed|Timeout|Not Run" "$BUILD/ctest-$t.log" | head -3
    if [ $r -ne 0 ]; then
      rc=1
      tail -40 "$BUILD/ctest-$t.log"
      [[ $t == *ipc* ]] && grep -q Timeout "$BUILD/ctest-$t.log" && ipc_hung=$t
    fi
  done
  # Skipped tests (no GPU) make ctest pass: report the step as skipped then.
  [ $rc -eq 0 ] && ! have_gpu && return 77
  return $rc
}
step "ctest gpu" ctest_gpu
nccl_ranks() {  # the nccl plane on 2 ranks, where each can own a GPU
  [ "${gpus:-0}" -ge 2 ] || { echo "skipped: $gpus GPU(s); NCCL needs one per rank"; return 77; }
  KOLO_GPU_TRANSPORT=nccl "$KOLORUN" -np 2 --timeout 900 "$BUILD/tests/collectives/check_collectives" --cuda --large \
    --expect-gpu-transport nccl
}
step "nccl plane on 2 ranks" nccl_ranks
step "bad input table (1 rank)" "$BUILD/tests/failures/kolo_bad_input_test"

python_workers() {
  have_gpu || return 77
  local rc=0 w
  export KOLO_TEST_DEVICE=cuda
  for w in api_worker.py "training_worker.py optimizer,join" sync_batch_norm_worker.py; do
    "$KOLORUN" -np 2 --timeout 300 $PY tests/python/workers/$w || rc=1
  done
  "$KOLORUN" -np 3 --timeout 300 $PY tests/python/workers/api_worker.py || rc=1
  KOLO_GPU_TRANSPORT=ipc "$KOLORUN" -np 2 --timeout 300 $PY tests/python/workers/api_worker.py || rc=1
  return $rc
}
step "python workers on CUDA tensors" python_workers

process_group() {
  have_gpu || return 77
  local rc=0 plane
  export KOLO_TEST_DEVICE=cuda
  for plane in host ipc; do
    KOLO_GPU_TRANSPORT=$plane "$KOLORUN" -np 2 --timeout 300 $PY tests/python/workers/process_group_worker.py \
      ops,ddp,errors || rc=1
  done
  "$KOLORUN" -np 2 --timeout 300 $PY tests/python/workers/process_group_worker.py device,names,objects || rc=1
  "$KOLORUN" -np 3 --timeout 300 $PY tests/python/workers/process_group_worker.py ops,subgroups || rc=1
  "$KOLORUN" -np 2 --timeout 300 $PY tests/gpu/fsdp2_worker.py || rc=1
  return $rc
}
step "process group (DDP) on CUDA tensors" process_group
kolo_torch_cuda() {  # kolo_torch's DistributedOptimizer on CUDA, on a side stream too, against the CPU baseline
  have_gpu || return 77
  KOLO_TEST_DEVICE=cuda "$BUILD/tests/torch/torch_test" --gtest_filter='TorchCuda/*' --gtest_brief=1
}
step "kolo_torch optimizer on CUDA" kolo_torch_cuda
[ -d "$DEBS/fmnist" ] && export DATA=$ROOT/$DEBS/fmnist  # the data set pack.sh carried
step "fashion_mnist --device cuda" tests/gpu/fashion_mnist_cuda.sh "$KOLORUN" "$ROOT/$BUILD/examples/fashion_mnist/fashion_mnist" $PY
examples_cuda() {  # the Python examples on the GPU: Horovod's shape and DDP's, 2 ranks
  have_gpu || return 77
  local rc=0 ex
  for ex in horovod_fashion_mnist ddp_fashion_mnist; do
    "$KOLORUN" -np 2 --timeout 300 $PY examples/python/$ex.py --device cuda --limit 6000 \
      ${DATA:+--data-dir "$DATA"} $([ $ex = horovod_fashion_mnist ] && echo --checkpoint "$BUILD/hvd.pt") || rc=1
  done
  return $rc
}
step "examples --device cuda" examples_cuda
step "kill mid GPU-collective" tests/gpu/kill_test.sh "$KOLORUN" "$ROOT/$BUILD/tests/collectives/check_collectives" $PY

bench() {
  have_gpu || return 77
  local np rc=0 res=$BUILD/bench
  mkdir -p "$res"
  $PY bench/gpu/allreduce.py --system copy --reps 3 --out "$res/copy.json" || rc=1
  for np in 2 4; do
    for plane in host ipc; do
      KOLO_GPU_TRANSPORT=$plane "$KOLORUN" -np $np --timeout 300 $PY bench/gpu/allreduce.py --system kolo \
        --reps 3 --out "$res/kolo-$plane-np$np.json" || rc=1
    done
    # The ipc plane without its direct allreduce: where KOLO_GPU_IPC_DIRECT_BYTES pays.
    [ $np = 2 ] && { KOLO_GPU_TRANSPORT=ipc KOLO_GPU_IPC_DIRECT_BYTES=0 "$KOLORUN" -np 2 --timeout 300 $PY \
      bench/gpu/allreduce.py --system kolo --reps 3 --out "$res/kolo-ipc-inbox-np2.json" || rc=1; }
    $PY -m torch.distributed.run --nproc_per_node $np --master_port 29517 bench/gpu/allreduce.py \
      --system gloo --reps 3 --out "$res/gloo-np$np.json" || rc=1
  done
  # One DDP training step (ResNet-18-sized CNN), 2 ranks on the GPU: kolo on each plane, gloo.
  for plane in host ipc; do
    KOLO_GPU_TRANSPORT=$plane "$KOLORUN" -np 2 --timeout 300 $PY bench/gpu/ddp_step.py --backend kolo \
      --out "$res/ddp-kolo-$plane-np2.json" || rc=1
  done
  "$KOLORUN" -np 2 --timeout 300 $PY bench/gpu/ddp_step.py --backend gloo --out "$res/ddp-gloo-np2.json" || rc=1
  # The reduction kernel alone against the device's copy.
  "$BUILD/bench/gpu/reduce_kernel_bench" > "$res/reduce-kernel.md" || rc=1
  # At most 8 files come back from $OUT: the numbers travel as one archive.
  tar -czf "$OUT/bench-json.tar.gz" -C "$res" .
  { $PY bench/gpu/report.py "$res" && echo && cat "$res/reduce-kernel.md"; } > "$OUT/bench-gpu.md" &&
    cat "$OUT/bench-gpu.md"
  return $rc
}
step "bench: allreduce on CUDA tensors" bench

# Horovod's own test_torch.py as one file on 2 ranks through the horovod.torch
# shim: its CUDA cases run here (torch.cuda.is_available()). Every failure
# must be explained (run_horovod_tests.py --check); the counts go in the README.
horovod_suite() {
  have_gpu || return 77
  [ -f "$DEBS/horovod/test/parallel/test_torch.py" ] || { echo "no Horovod test files in $DEBS (bench/device/pack.sh)"; return 1; }
  if ! $PY -c 'import mock' 2>/dev/null; then
    $PY -m pip install -q --no-index --no-deps --no-compile --target "$BUILD/pydeps" "$DEBS"/wheels/*.whl || return 1
    export PYTHONPATH=$PYTHONPATH:$ROOT/$BUILD/pydeps
  fi
  $PY tests/horovod/run_horovod_tests.py "$DEBS/horovod" --mode file --apart none --launcher kolorun --check \
    --python $PY --kolorun "$KOLORUN" --pythonpath "$ROOT/$BUILD/python" --timeout 480
}
step "horovod test_torch.py on CUDA" horovod_suite

echo "=== done in $SECONDS s; failed: ${failed[*]:-none}"
[ ${#failed[@]} -eq 0 ]
