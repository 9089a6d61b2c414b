# A bare Debian 12 root for a script to run things in (sourced): a debootstrap
# minbase made once per machine (KOLO_DEBIAN_BASE, default
# ~/.cache/kolo/debian-12-minbase) and copied for each run into a fresh
# directory, with this machine's name server and extra certificate authorities
# (a proxy's, say, for apt and pip to verify). Needs root, debootstrap and
# network (Debian's mirror). Used by tests/python/wheel_in_bare_root.sh (the
# wheel where nothing was built) and bench/device/rehearse.sh (the GPU
# machine's build where none of Debian's -dev packages is).
#
#   bare_root            makes $R (inside $WORK, a new temporary directory) and
#                        sets a trap that removes both on exit
#   mount_in TARGET ARGS mounts (mount ARGS TARGET), unmounted on exit
#   bare_root_mounts     /proc, /dev, a /dev/shm and /dev/pts of the root's own
MOUNTS=()  # what cleanup unmounts, innermost last

bare_root_cleanup() {
  # Processes still running in the root (a hung job) would keep its mounts busy.
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/root" 2>/dev/null)" = "$R" ] && kill -9 "${p#/proc/}" 2>/dev/null
  done
  for ((i = ${#MOUNTS[@]} - 1; i >= 0; i--)); do
    umount "${MOUNTS[i]}" 2>/dev/null || umount -l "${MOUNTS[i]}"
  done
  if findmnt -rn -o TARGET | grep -q "^$R/"; then
    echo "mounts remain under $R; not removing $WORK" >&2
  else
    rm -rf --one-file-system "$WORK"
  fi
}

mount_in() {  # mount_in TARGET MOUNT-ARGS...
  mkdir -p "$1"
  mount "${@:2}" "$1"
  MOUNTS+=("$1")
}

bare_root() {
  local base=${KOLO_DEBIAN_BASE:-${XDG_CACHE_HOME:-$HOME/.cache}/kolo/debian-12-minbase}
  WORK=$(mktemp -d /tmp/kolo-bare-root.XXXXXX)
  R=$WORK/root
  trap bare_root_cleanup EXIT
  # The base, once per machine (a lock: two scripts must not both make it).
  mkdir -p "$(dirname "$base")"
  (
    flock 9
    if [ ! -f "$base/.kolo-base" ]; then
      command -v debootstrap >/dev/null || { echo "FAIL: needs debootstrap (scripts/install-deps.sh)"; exit 1; }
      mirror=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
      echo "== debootstrap minbase bookworm into $base (once per machine)"
      rm -rf --one-file-system "$base"
      debootstrap --variant=minbase --include=ca-certificates bookworm "$base" \
        "${mirror:-http://deb.debian.org/debian}" > "$WORK/debootstrap.log" 2>&1 \
        || { tail -20 "$WORK/debootstrap.log"; echo "FAIL: debootstrap"; exit 1; }
      touch "$base/.kolo-base"
    fi
  ) 9> "$base.lock" || exit 1
  cp -a "$base" "$R"
  cp /etc/resolv.conf "$R/etc/resolv.conf"
  cp /usr/local/share/ca-certificates/*.crt "$R/usr/local/share/ca-certificates/" 2>/dev/null || true
}

bare_root_mounts() {
  mount_in "$R/proc" -t proc proc
  mount_in "$R/dev" --bind /dev
  mount_in "$R/dev/shm" -t tmpfs -o mode=1777 tmpfs   # the root's own, not this machine's
  mount_in "$R/dev/pts" -t devpts -o newinstance,ptmxmode=0666 devpts   # for apt's log
}
