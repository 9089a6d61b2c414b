#!/bin/sh
# as_host.sh "a a b b c" CMD ARGS...: runs CMD with KOLO_HOSTNAME set to the
# word of the list at position $KOLO_RANK (set by kolorun), so that the ranks
# of one machine form "hosts" a, b, c: kolo then runs its multi-host
# (hierarchical or flat TCP) collectives between them, each host's ranks
# sharing memory.
list=$1
shift
i=0
for h in $list; do
  if [ "$i" = "$KOLO_RANK" ]; then
    KOLO_HOSTNAME=$h
    export KOLO_HOSTNAME
  fi
  i=$((i + 1))
done
[ -n "${KOLO_HOSTNAME:-}" ] || { echo "as_host.sh: no host for rank ${KOLO_RANK:-?} in '$list'" >&2; exit 2; }
exec "$@"
