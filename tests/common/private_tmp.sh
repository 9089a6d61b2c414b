#!/bin/sh
# tests/common/private_tmp.sh COMMAND ARGS...: runs COMMAND with TMPDIR a new
# directory of its own and removes that directory afterwards, with whatever the
# test's programs left there. Programs kolo's tests start leave files in the
# temporary directory by design or when killed, and a test that kills workers on
# purpose cannot stop them: torchrun's log folders (torchelastic_*),
# torch.multiprocessing's error files, Lightning's spawn checkpoints, the
# autograph modules of a SIGKILLed TensorFlow worker. Here they end with the test.
# pytest's tmp_path lives under it too.
#
# A test that ctest kills at its timeout (SIGKILL) cannot remove its directory:
# the next test to start removes the directories whose test is gone (the pid in
# their name is not running). The name is short (/tmp/kolo-tmp.PID.XXXX): Ray's
# and Open MPI's socket paths live under it, within the 107 bytes a Unix
# socket's path may have.
for old in /tmp/kolo-tmp.*; do
  pid=${old#/tmp/kolo-tmp.}
  pid=${pid%%.*}
  [ -d "$old" ] && [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null && rm -rf "$old"
done
dir=$(mktemp -d "/tmp/kolo-tmp.$$.XXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
TMPDIR=$dir "$@"
