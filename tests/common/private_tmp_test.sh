#!/bin/sh
# tests/common/private_tmp.sh's promises: the command sees a TMPDIR of its own,
# its exit status comes back, what it left is removed, and so is the directory
# of a test that was SIGKILLed (by the next test to start).
set -u
WRAP=$(dirname "$0")/private_tmp.sh
fail() { echo "FAIL: $*"; exit 1; }
out=$(mktemp) && trap 'rm -f "$out"' EXIT

"$WRAP" sh -c 'echo "$TMPDIR" > "$0"; mkdir "$TMPDIR/left"; touch "$TMPDIR/left/file"; exit 3' "$out"
[ $? -eq 3 ] || fail "the command's exit status 3 did not come back"
dir=$(cat "$out")
case $dir in /tmp/kolo-tmp.*) ;; *) fail "TMPDIR was '$dir'" ;; esac
[ ! -e "$dir" ] || fail "$dir was left"

# A wrapper killed with its command (ctest's timeout) cannot remove its directory; the next
# one to start does (any test's: it may already have, side by side with this one).
"$WRAP" sh -c 'echo "$TMPDIR" > "$0"; touch "$TMPDIR/file"; kill -9 $PPID' "$out" 2>/dev/null
status=$?
[ $status -eq 137 ] || fail "the wrapper was not SIGKILLed (exit $status)"
dir=$(cat "$out")
"$WRAP" true || fail "'true' failed"
[ ! -e "$dir" ] || fail "the killed test's $dir was left by the next test"
echo "PASS: private TMPDIR made, status kept, leftovers removed (also a killed test's)"
