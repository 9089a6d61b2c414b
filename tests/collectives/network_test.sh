#!/usr/bin/env bash
# NIC choice and port confinement on one machine, ranks split into emulated
# hosts a, b by KOLO_HOSTNAME (as_host.sh), so that they use TCP:
#   - KOLO_IFACE by name (lo) and by CIDR (127.0.0.0/8) works; the chosen
#     address is logged at info level;
#   - KOLO_IFACE with a wrong name, a network no interface is in, or
#     garbage fails every rank with an error naming the setting and listing
#     this host's interfaces;
#   - KOLO_PORT_RANGE confines every listening port (the ranks' data
#     connections and kolorun's store) to the range; a malformed range and a
#     range too small for the job are errors naming it.
# (The routed-address choice with a decoy bridge on every host needs real
# network namespaces: tests/multihost/collectives_nic_test.sh.)
#   network_test.sh KOLORUN IDENTITY_BINARY
set -u
KOLORUN=$1 BIN=$2
AS_HOST=$(dirname "$0")/as_host.sh
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# run NAME VARS...: 4 ranks on hosts a a b b; output in $tmp/out, exit code in $rc.
run() {
  local name=$1
  shift
  env "$@" timeout -s KILL 120 "$KOLORUN" -np 4 --timeout 100 "$AS_HOST" "a a b b" "$BIN" > "$tmp/out" 2>&1
  rc=$?
  what=$name
}
ok() { echo "ok: $what"; }
bad() { echo "FAILED: $what: $*"; sed 's/^/    /' "$tmp/out" | tail -20; fail=1; }
works() {  # every rank printed its identity with the right sum
  [ $rc -eq 0 ] && [ "$(grep -c 'identity rank=.* sum=10$' "$tmp/out")" -eq 4 ] && return 0
  bad "exit $rc, expected 0 and 4 identity lines"; return 1
}
fails_with() {  # a rank's error contains the text (kolorun stops the others once one has failed)
  local text=$1
  [ $rc -ne 0 ] || { bad "exit 0, expected a failure"; return 1; }
  grep -qF -- "$text" "$tmp/out" || { bad "no rank said: $text"; return 1; }
}

for mode in 1 0; do
  run "KOLO_IFACE=lo (hierarchical=$mode)" KOLO_IFACE=lo KOLO_LOG=info KOLO_HIERARCHICAL=$mode
  works && { grep -q "data connections: advertising 127.0.0.1 (interface lo, KOLO_IFACE=lo)" "$tmp/out" && ok || bad "no info line naming the address"; }
done
run "KOLO_IFACE=127.0.0.0/8" KOLO_IFACE=127.0.0.0/8
works && ok
run "default choice is logged" KOLO_LOG=info
works && { grep -q "data connections: advertising 127.0.0.1 (interface lo, the route to the rendezvous store)" "$tmp/out" && ok || bad "no info line naming the routed address"; }

run "KOLO_IFACE with a wrong name" KOLO_IFACE=nosuch0
if fails_with "has no interface of that name with an IPv4 address; its interfaces: lo 127.0.0.1"; then
  # Each rank names its own host.
  if grep -E '^\[[01]\] .*KOLO_IFACE=nosuch0: host b|^\[[23]\] .*KOLO_IFACE=nosuch0: host a' "$tmp/out" ||
     ! grep -Eq '^\[[0-3]\] kolo rank [0-3]: KOLO_IFACE=nosuch0: host [ab] ' "$tmp/out"; then
    bad "the error does not name the rank's own host"
  else
    ok
  fi
fi
run "KOLO_IFACE with a network of no interface" KOLO_IFACE=198.51.100.0/24
fails_with "KOLO_IFACE=198.51.100.0/24: host" && fails_with "has no IPv4 address in that network; its interfaces: lo 127.0.0.1" && ok
run "KOLO_IFACE garbage" KOLO_IFACE=10.0.0.0/99
fails_with "KOLO_IFACE=10.0.0.0/99 is neither an interface name nor an IPv4 CIDR" && ok

lo=$((40000 + RANDOM % 20000))
hi=$((lo + 19))
for mode in 1 0; do
  run "KOLO_PORT_RANGE=$lo-$hi (hierarchical=$mode)" KOLO_PORT_RANGE=$lo-$hi KOLO_LOG=debug KOLO_HIERARCHICAL=$mode
  if works; then
    ports=$( (grep -o "data connections: listening on [0-9.]*:[0-9]*" "$tmp/out"; grep -o "rendezvous store listening on [0-9.]*:[0-9]*" "$tmp/out") | sed 's/.*://')
    want=5  # 4 ranks' listeners + kolorun's store
    n=$(wc -w <<< "$ports")
    out_of_range=$(for p in $ports; do [ "$p" -ge $lo ] && [ "$p" -le $hi ] || echo "$p"; done)
    if [ "$n" -lt "$want" ]; then bad "saw $n listening ports in the log, expected $want"
    elif [ -n "$out_of_range" ]; then bad "ports outside $lo-$hi: $out_of_range"
    else ok; fi
  fi
done
run "KOLO_PORT_RANGE malformed" KOLO_PORT_RANGE=9-3
grep -qF "KOLO_PORT_RANGE=9-3 is not a port range LO-HI with 1 <= LO <= HI <= 65535" "$tmp/out" && [ $rc -ne 0 ] && ok || bad "no error naming the range"
run "KOLO_PORT_RANGE too small" KOLO_PORT_RANGE=$lo-$((lo + 1)) KOLO_HIERARCHICAL=0
[ $rc -ne 0 ] && grep -qF "every port of KOLO_PORT_RANGE=$lo-$((lo + 1)) is in use on this host" "$tmp/out" && ok || bad "no error naming the exhausted range"

exit $fail
