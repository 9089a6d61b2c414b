#!/usr/bin/env bash
# The main job on the GPU (issue: "fashion_mnist --device cuda on 2 ranks
# reaches the accuracy of its CPU run"): one epoch on 2 ranks sharing the GPU
# beside the same epoch on the CPU, the accuracies within a point of each
# other (the GPU's convolutions sum in another order); then, on the GPU, a
# checkpoint written after 150 steps and resumed to the epoch's end, bf16
# autocast, and SyncBatchNorm (convbn) on a 6,000-image slice. Needs a GPU
# (exit 77 without one); DEVICE=cpu rehearses the same runs on the CPU. DATA:
# the data set's folder where it is not Debian's (the GPU machine: the one
# bench/device/pack.sh carries).
#   tests/gpu/fashion_mnist_cuda.sh KOLORUN FASHION_MNIST [PYTHON]
set -uo pipefail
KOLORUN=$1 BIN=$2 PY=${3:-python3}
DEVICE=${DEVICE:-cuda}
if [ "$DEVICE" = cuda ] && ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  echo "skipped: no GPU"; exit 77
fi
WORK=$(mktemp -d /tmp/kolo-gpu-fmnist.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
fail=0
train() {  # NAME ARGS...: one 2-rank run; prints rank 0's last lines; its log is $WORK/NAME.log
  local name=$1
  shift
  [[ " $* " == *" --checkpoint "* ]] || set -- "$@" --checkpoint ""  # no checkpoint unless asked
  [ -z "${DATA:-}" ] || set -- "$@" --data "$DATA"
  "$KOLORUN" -np 2 --timeout 600 "$BIN" --no-progress "$@" > "$WORK/$name.log" 2>&1
  local rc=$?
  echo "--- $name (exit $rc): $(grep -E 'fashion_mnist:|done:|resumed' "$WORK/$name.log" | tr '\n' ' ')"
  [ $rc -eq 0 ] || { tail -20 "$WORK/$name.log"; fail=1; }
}
accuracy() { sed -n 's/.*done: test accuracy \([0-9.]*\)%.*/\1/p' "$WORK/$1.log" | tail -1; }

train cpu --device cpu
train gpu --device "$DEVICE"
grep -q "on $DEVICE" "$WORK/gpu.log" || { echo "FAIL: the run does not say it trained on $DEVICE"; fail=1; }
a_cpu=$(accuracy cpu) a_gpu=$(accuracy gpu)
echo "accuracy: cpu ${a_cpu:-?} %, $DEVICE ${a_gpu:-?} %"
awk -v a="${a_cpu:-0}" -v b="${a_gpu:-100}" 'BEGIN { d = a - b; exit !(d <= 1 && d >= -1 && a > 80) }' ||
  { echo "FAIL: the accuracies differ by more than a point (or the CPU run's is not above 80 %)"; fail=1; }

ckpt=$WORK/run.ckpt
train stopped --device "$DEVICE" --checkpoint "$ckpt" --checkpoint-every 50 --stop-after 150
train resumed --device "$DEVICE" --checkpoint "$ckpt" --resume
grep -q "resumed from" "$WORK/resumed.log" || { echo "FAIL: the second run did not resume"; fail=1; }
a_res=$(accuracy resumed)
awk -v a="${a_cpu:-0}" -v b="${a_res:-100}" 'BEGIN { d = a - b; exit !(d <= 1.5 && d >= -1.5) }' ||
  { echo "FAIL: the resumed run's accuracy ${a_res:-?} % is not within 1.5 points of ${a_cpu:-?} %"; fail=1; }

train bf16 --device "$DEVICE" --amp bf16 --train-limit 6000
train convbn --device "$DEVICE" --model convbn --batchnorm sync --train-limit 6000
train fp16 --device "$DEVICE" --amp fp16 --train-limit 6000
[ $fail -eq 0 ] && echo "fashion_mnist on $DEVICE: passed"
exit $fail
