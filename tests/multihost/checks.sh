# Checks shared by the multi-host test scripts (source after hosts.sh): counted failures with
# their evidence, and "nothing of the job left on a host".
#   expect "what" CMD...   runs CMD; "ok   what" or "FAIL what" (counted in $fails)
#   has FILE REGEX         FILE has a line matching REGEX (grep -E); shows FILE when not
#   has_text FILE TEXT     the same for a fixed string
#   eq A B                 A = B, or says both
#   within A B BOUND       A - B <= BOUND (seconds, fractions allowed)
#   job_leftovers H        prints what of a job is left on host H: every process but its holder
#                          and sshd, and whatever is in its /dev/shm (empty: nothing)
#   clean_within H SECS    waits up to SECS for job_leftovers H to be empty; says what is left
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
ok() { echo "ok   $*"; }
expect() {
  local what=$1; shift
  if "$@"; then ok "$what"; else fail "$what"; fi
}
has() { grep -qE -- "$2" "$1" || { echo "  /$2/ not in $1:"; sed 's/^/    /' "$1" | tail -40; return 1; }; }
has_text() { grep -qF -- "$2" "$1" || { echo "  '$2' not in $1:"; sed 's/^/    /' "$1" | tail -40; return 1; }; }
eq() { [ "$1" = "$2" ] || { echo "  expected '$2', got '$1'"; return 1; }; }
within() { awk -v a="$1" -v b="$2" -v c="$3" 'BEGIN { exit !(a - b <= c) }'; }

job_leftovers() {
  local h=$1 p comm out=""
  for p in $(kh_pids "$h"); do
    comm=$(cat "/proc/$p/comm" 2>/dev/null) || continue
    [[ $comm == sshd || $comm == sleep ]] && continue   # sshd, and the holder (sleep infinity)
    out+="$p:$(tr '\0' ' ' < "/proc/$p/cmdline") "
  done
  local shm
  shm=$(kh_exec "$h" ls /dev/shm)
  [ -z "$shm" ] || out+="/dev/shm:$shm"
  echo "$out"
}

clean_within() {
  local h=$1 secs=$2 i left
  for ((i = 0; i < secs * 10; i++)); do
    left=$(job_leftovers "$h")
    [ -z "$left" ] && return 0
    sleep 0.1
  done
  echo "  left on $h: $left"
  return 1
}
