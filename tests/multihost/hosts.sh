#!/usr/bin/env bash
# Emulated hosts for multi-host tests: network namespaces on a bridge, each "host" with its own
# hostname, /dev/shm, /etc/hosts and sshd, sharing this machine's filesystem (so the build tree
# is at the same path everywhere). Needs root, iproute2, util-linux, openssh-server/-client.
#
# Library (source it from bash):
#   source tests/multihost/hosts.sh
#   kh_up N               bring up hosts h0..h(N-1); installs an EXIT/INT/TERM trap that tears
#                         everything down, and a watchdog that does so if this shell is killed
#                         (even by SIGKILL). Sets KH_ID, KH_DIR, KH_SSH_CONFIG, KH_HOSTS (array
#                         of names), KH_NET (e.g. 10.213.7), kh_addr h1 -> 10.213.7.11.
#   kh_exec H CMD...      run CMD on host H (its network, hostname, mounts; same cwd and env)
#   kh_ssh H CMD...       from the root namespace there is no route to the hosts: this runs
#                         `ssh -F $KH_SSH_CONFIG H CMD` from inside h0 (or h1 when H is h0)
#   kh_addr H             the host's address;  kh_ns H: its network namespace name
#   kh_shape H RATE       shape H's link both ways with tbf (e.g. 2gbit); kh_unshape H
#   kh_link H down|up     pull / plug H's cable (its switch port)
#   kh_decoy H [CIDR]     add a bridge "docker0" with CIDR (default 172.17.0.1/16) on H
#   kh_kill H [SIG]       kill every process started on H (not its namespace holder or sshd)
#   kh_pids H             pids of every process on H
#   kh_on_down CMD        run CMD (eval'd) at teardown, before the hosts go (last added first)
#   kh_down               tear down this run (idempotent; the trap calls it)
#   kh_down_stale         remove namespaces of earlier runs whose owner died (kh_up calls it)
# Works under `set -euo pipefail`.
# Inside a host: `ssh -F $KH_SSH_CONFIG h1 cmd` (BatchMode, known host keys, root's key);
# hostnames h0, h1, ... resolve through the host's private /etc/hosts.
#
# CLI (for poking at it by hand; the hosts stay up until `down`):
#   hosts.sh up N            prints KH_ID
#   hosts.sh exec ID H CMD…  hosts.sh ssh ID H CMD…   hosts.sh down ID   hosts.sh down --stale
#
# Layout: namespaces kh-<id>-sw (bridge br0, ports p<i>) and kh-<id>-h<i> (eth0 = <net>.<10+i>/24);
# state under /tmp/kh-<id>/ (keys, configs, logs, holder pids, owner). Every process on a host
# shares its network namespace, so `ip netns pids` finds all of them at teardown.

KH_PREFIX=kh
KH_ROOT=${KH_ROOT:-/tmp}
KH_ON_DOWN=()                                    # kh_on_down may be called before kh_up

kh_die() { echo "hosts.sh: $*" >&2; return 1; }

kh_ns() { echo "$KH_PREFIX-$KH_ID-$1"; }
kh_index() { local h=$1; [[ $h =~ ^h([0-9]+)$ ]] || { kh_die "no such host '$h'"; return 1; }; echo "${BASH_REMATCH[1]}"; }
kh_addr() { local i; i=$(kh_index "$1") || return 1; echo "$KH_NET.$((10 + i))"; }
kh_holder() { cat "$KH_DIR/$1/holder.pid" 2>/dev/null || kh_die "host '$1' is not up (run $KH_ID)"; }

# Run a command on host H: enter the holder's network, UTS, IPC and mount namespaces. The mount
# namespace shares every mount of this machine except /dev/shm, /run and /etc/hosts, so the
# working directory exists there too. -r keeps the holder's root: entering a mount namespace
# otherwise moves to its real root, which is not ours inside a chroot.
kh_exec() {
  local h=$1 pid; shift
  pid=$(kh_holder "$h") || return 1
  nsenter -t "$pid" -n -u -i -m -r --wd="$PWD" -- "$@"
}

kh_ssh() {
  local h=$1 from=h0; shift
  [ "$h" = h0 ] && from=h1
  kh_exec "$from" ssh -F "$KH_SSH_CONFIG" "$h" "$@"
}

# ip/tc inside a host's (or the switch's) network namespace. `ip -n` would also remount /sys in
# a private mount namespace ("mount --make-rslave /"), which fails where / is not a mount point
# (a plain chroot, such as a fresh Debian root); nsenter enters the network namespace only.
kh_ip() { local ns=$1; shift; nsenter --net="/run/netns/$ns" ip "$@"; }
kh_tc() { local ns=$1; shift; nsenter --net="/run/netns/$ns" tc "$@"; }

kh_pids() { ip netns pids "$(kh_ns "$1")" 2>/dev/null; }

kh_kill() {
  local h=$1 sig=${2:-KILL} keep p
  keep=" $(cat "$KH_DIR/$h/holder.pid" "$KH_DIR/$h/sshd.pid" 2>/dev/null | tr '\n' ' ') "
  for p in $(kh_pids "$h"); do
    [[ $keep == *" $p "* ]] || kill -s "$sig" "$p" 2>/dev/null || true
  done
  return 0
}

kh_shape() {
  local h=$1 rate=$2 i
  i=$(kh_index "$h") || return 1
  kh_ip "$(kh_ns "$h")" link set eth0 txqueuelen 1000 &&
  kh_tc "$(kh_ns "$h")" qdisc replace dev eth0 root tbf rate "$rate" burst 512kb latency 10ms &&
  kh_tc "$(kh_ns sw)" qdisc replace dev "p$i" root tbf rate "$rate" burst 512kb latency 10ms
}
kh_unshape() {
  local h=$1 i
  i=$(kh_index "$h") || return 1
  kh_tc "$(kh_ns "$h")" qdisc del dev eth0 root 2>/dev/null || true
  kh_tc "$(kh_ns sw)" qdisc del dev "p$i" root 2>/dev/null || true
}

kh_link() {
  local h=$1 state=$2 i
  i=$(kh_index "$h") || return 1
  [[ $state == up || $state == down ]] || { kh_die "kh_link: state must be up or down, not '$state'"; return 1; }
  kh_ip "$(kh_ns sw)" link set "p$i" "$state"
}

kh_decoy() {
  local h=$1 cidr=${2:-172.17.0.1/16} ns
  ns=$(kh_ns "$h") || return 1
  kh_ip "$ns" link add docker0 type bridge && kh_ip "$ns" addr add "$cidr" dev docker0 &&
  kh_ip "$ns" link set docker0 up
}

kh_on_down() { KH_ON_DOWN=("$1" "${KH_ON_DOWN[@]}"); }

# "pid starttime" identifies a process even after its pid is reused.
kh_proc_id() { local s; s=$(cut -d' ' -f22 "/proc/$1/stat" 2>/dev/null) && echo "$1 $s"; }
# The owner file appears whole (a rename): another run's kh_down_stale that found it empty, as
# a redirection leaves it for a moment, took the run for dead and removed its directory (CI).
kh_write_owner() { echo "$1" > "$KH_DIR/owner.new" && mv -f "$KH_DIR/owner.new" "$KH_DIR/owner"; }
kh_owner_alive() {
  local f=$KH_ROOT/$KH_PREFIX-$1/owner o
  [ -f "$f" ] || return 1
  o=$(cat "$f")
  [ "$o" = cli ] && return 0                     # hosts.sh up: kept until `hosts.sh down`
  [ "$(kh_proc_id "${o%% *}")" = "$o" ]
}

# Tear down run ID: kill everything in its namespaces, delete them, remove its state.
kh_teardown_id() {
  local id=$1 ns p n left
  local nss=() pids=()
  while read -r ns _; do
    [[ $ns == "$KH_PREFIX-$id-"* ]] && nss+=("$ns")
  done < <(ip netns list 2>/dev/null)
  for ns in "${nss[@]}"; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; pids+=("$p"); done
  done
  for n in $(seq 1 100); do                      # killed processes leave within ms; wait ≤ 5 s
    left=0
    for p in "${pids[@]}"; do [ -d "/proc/$p" ] && left=1 && break; done
    [ $left = 0 ] && break
    sleep 0.05
  done
  for ns in "${nss[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
  rm -rf "${KH_ROOT:?}/$KH_PREFIX-$id"
}

kh_down() {
  [ -n "${KH_ID:-}" ] || return 0
  local c
  for c in "${KH_ON_DOWN[@]}"; do eval "$c" >/dev/null 2>&1 || true; done
  KH_ON_DOWN=()
  [ -z "${KH_WATCH_PID:-}" ] || kill -KILL "$KH_WATCH_PID" 2>/dev/null || true
  KH_WATCH_PID=
  kh_teardown_id "$KH_ID"
  KH_ID=
}

kh_down_stale() {
  local ns id seen=" "
  while read -r ns _; do
    [[ $ns =~ ^$KH_PREFIX-([0-9a-f]+)-(sw|h[0-9]+)$ ]] || continue
    id=${BASH_REMATCH[1]}
    [[ $seen == *" $id "* ]] && continue
    seen+="$id "
    kh_owner_alive "$id" || kh_teardown_id "$id"
  done < <(ip netns list 2>/dev/null)
  for d in "$KH_ROOT/$KH_PREFIX"-*; do          # state dirs whose namespaces are already gone
    [ -d "$d" ] || continue
    id=${d##*/$KH_PREFIX-}
    [[ $id =~ ^[0-9a-f]+$ ]] || continue
    # A run that is starting has its directory a moment before its owner file: spare those.
    [ -f "$d/owner" ] || [ -n "$(find "$d" -maxdepth 0 -mmin +1)" ] || continue
    kh_owner_alive "$id" || rm -rf "$d"
  done
  return 0
}

# A /24 in 10.0.0.0/8 that no route of this machine and no other live run uses. The hosts' own
# network stacks are private, so a clash would only confuse a human reading both; still avoid it.
kh_pick_net() {
  local used net
  used=$(ip -4 route show table all 2>/dev/null; cat "$KH_ROOT/$KH_PREFIX"-*/net 2>/dev/null)
  for _ in $(seq 1 50); do
    net="10.$((200 + RANDOM % 50)).$((RANDOM % 256))"
    grep -q "$net\." <<<"$used" || { echo "$net"; return 0; }
  done
  kh_die "no free 10.x.y.0/24 found"
}

kh_write_files() {
  local n=$1 i h
  {
    echo "127.0.0.1 localhost"
    echo "::1 localhost ip6-localhost ip6-loopback"
    for ((i = 0; i < n; i++)); do echo "$KH_NET.$((10 + i)) h$i"; done
  } > "$KH_DIR/hosts"
  ssh-keygen -q -t ed25519 -N '' -C "kh-$KH_ID" -f "$KH_DIR/id_ed25519" || return 1
  cp "$KH_DIR/id_ed25519.pub" "$KH_DIR/authorized_keys"
  : > "$KH_DIR/known_hosts"
  for ((i = 0; i < n; i++)); do
    h=h$i
    mkdir -p "$KH_DIR/$h"
    ssh-keygen -q -t ed25519 -N '' -C "$h" -f "$KH_DIR/$h/ssh_host_ed25519_key" || return 1
    echo "$h,$KH_NET.$((10 + i)) $(cut -d' ' -f1,2 "$KH_DIR/$h/ssh_host_ed25519_key.pub")" >> "$KH_DIR/known_hosts"
    cat > "$KH_DIR/$h/sshd_config" <<EOF
ListenAddress $KH_NET.$((10 + i))
HostKey $KH_DIR/$h/ssh_host_ed25519_key
PidFile $KH_DIR/$h/sshd.pid
AuthorizedKeysFile $KH_DIR/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
UseDNS no
MaxStartups 100:30:200
MaxSessions 100
EOF
  done
  cat > "$KH_DIR/ssh_config" <<EOF
Host *
  User root
  IdentityFile $KH_DIR/id_ed25519
  IdentitiesOnly yes
  UserKnownHostsFile $KH_DIR/known_hosts
  GlobalKnownHostsFile /dev/null
  StrictHostKeyChecking yes
  BatchMode yes
  ConnectTimeout 5
  ServerAliveInterval 2
  ServerAliveCountMax 3
  LogLevel ERROR
EOF
}

# The hosts' mount namespaces must not pass their mounts back to this machine: "private" marks
# every mount so, but needs / to be a mount point. In a plain chroot it is not; there every mount
# must already be private (none "shared:" in mountinfo but /run/netns), and "unchanged" keeps them so.
kh_propagation() {
  if mountpoint -q /; then echo private; return; fi
  # /run/netns is shared by `ip netns` itself; the holder makes its copy a slave first.
  if grep ' shared:' /proc/self/mountinfo | grep -vqE ' /run/netns(/[^ ]*)? '; then
    kh_die "/ is not a mount point (a chroot?) and some mounts are shared: hosts cannot be isolated here"
    return 1
  fi
  echo unchanged
}

# One host: network namespace + veth to the switch, then a holder process owning the UTS, IPC and
# mount namespaces (own hostname, tmpfs /dev/shm and /run, private /etc/hosts), then sshd.
kh_start_host() {
  local i=$1 h=h$1 ns sw addr n
  ns=$(kh_ns "$h"); sw=$(kh_ns sw); addr=$KH_NET.$((10 + i))
  ip netns add "$ns" || return 1
  ip link add eth0 netns "$ns" type veth peer name "p$i" netns "$sw" || return 1
  kh_ip "$sw" link set "p$i" master br0 up || return 1
  kh_ip "$ns" addr add "$addr/24" dev eth0 || return 1
  kh_ip "$ns" link set lo up && kh_ip "$ns" link set eth0 up || return 1
  # setsid + no inherited stdio: nothing of ours keeps a caller's pipe (ctest's) open.
  # A fresh sysfs shows this host's interfaces under /sys/class/net; the machine's cgroup mounts
  # are carried over onto it (slurmd needs them even with proctrack/linuxproc).
  setsid nsenter --net="/run/netns/$ns" unshare --uts --ipc --mount --propagation "$(kh_propagation)" -- bash -c '
    set -e
    hostname "$1"
    if mountpoint -q /run/netns; then mount --make-rslave /run/netns; fi
    mount -t tmpfs -o mode=1777,size=50% tmpfs /dev/shm
    mount -t tmpfs -o mode=755 tmpfs /run
    mkdir -m 755 /run/sshd /run/kh-cgroup
    mount --rbind /sys/fs/cgroup /run/kh-cgroup
    mount -t sysfs sysfs /sys
    mount --rbind /run/kh-cgroup /sys/fs/cgroup
    umount -l /run/kh-cgroup && rmdir /run/kh-cgroup
    mount --bind "$2/hosts" /etc/hosts
    echo $$ > "$2/$1/holder.pid.tmp" && mv "$2/$1/holder.pid.tmp" "$2/$1/holder.pid"
    exec -a "kh-holder-$3-$1" sleep infinity' kh-holder "$h" "$KH_DIR" "$KH_ID" </dev/null >"$KH_DIR/$h/holder.log" 2>&1 &
  disown $!                                      # no "Killed" notice from this shell at teardown
  for n in $(seq 1 200); do
    [ -s "$KH_DIR/$h/holder.pid" ] && break
    sleep 0.02
  done
  [ -s "$KH_DIR/$h/holder.pid" ] || { kh_die "host $h did not start: $(cat "$KH_DIR/$h/holder.log")"; return 1; }
  kh_exec "$h" /usr/sbin/sshd -f "$KH_DIR/$h/sshd_config" -E "$KH_DIR/$h/sshd.log" </dev/null >/dev/null 2>&1 ||
    { kh_die "sshd on $h failed: $(cat "$KH_DIR/$h/sshd.log")"; return 1; }
}

kh_wait_sshd() {
  local h=$1 n
  for n in $(seq 1 100); do
    if [ -s "$KH_DIR/$h/sshd.pid" ] && kh_exec "$h" bash -c "exec 3<>/dev/tcp/$(kh_addr "$h")/22" 2>/dev/null; then
      return 0
    fi
    sleep 0.05
  done
  kh_die "sshd on $h is not listening: $(cat "$KH_DIR/$h/sshd.log" 2>/dev/null)"
}

kh_trap() {
  trap 'kh_down' EXIT
  trap 'kh_down; trap - INT; kill -INT $$' INT
  trap 'kh_down; trap - TERM; kill -TERM $$' TERM
}

# kh_up N [owner]: owner "cli" keeps the hosts past this shell (the CLI); default: this shell.
kh_up() {
  local n=$1 owner=${2:-} i
  [[ $n =~ ^[1-9][0-9]?$ ]] || { kh_die "kh_up: host count must be 1..99, not '$n'"; return 1; }
  [ "$(id -u)" = 0 ] || { kh_die "emulated hosts need root (network namespaces)"; return 1; }
  for i in ip nsenter unshare /usr/sbin/sshd ssh ssh-keygen tc; do
    command -v "$i" >/dev/null || { kh_die "missing $i (scripts/install-deps.sh installs it)"; return 1; }
  done
  [ -n "${KH_ID:-}" ] && { kh_die "hosts already up (run $KH_ID)"; return 1; }
  kh_down_stale
  KH_ID=$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')
  KH_DIR=$KH_ROOT/$KH_PREFIX-$KH_ID
  mkdir -m 755 "$KH_DIR" || return 1           # 755: munged (user munge) lives below
  if [ -z "$owner" ]; then
    kh_write_owner "$(kh_proc_id $$)"
    kh_trap
    # Watchdog: if this shell dies without its trap (SIGKILL from a test timeout), tear down.
    setsid bash -c 'while kill -0 "$1" 2>/dev/null && [ -d "$3" ]; do sleep 1; done
                    [ -d "$3" ] && exec bash "$2" down "$4"' kh-watch $$ "$(realpath "${BASH_SOURCE[0]}")" "$KH_DIR" "$KH_ID" \
      </dev/null >/dev/null 2>&1 &
    KH_WATCH_PID=$!
    disown $!
  else
    kh_write_owner "$owner"
  fi
  KH_NET=$(kh_pick_net) || { kh_down; return 1; }
  echo "$KH_NET" > "$KH_DIR/net"
  KH_SSH_CONFIG=$KH_DIR/ssh_config
  KH_HOSTS=()
  for ((i = 0; i < n; i++)); do KH_HOSTS+=("h$i"); done
  kh_write_files "$n" || { kh_down; return 1; }
  # Each host bind-mounts its own hosts file over /etc/hosts, which needs the file to exist (a
  # minimal Debian root has none). An empty one resolves exactly as a missing one does.
  [ -e /etc/hosts ] || : > /etc/hosts
  ip netns add "$(kh_ns sw)" &&
  kh_ip "$(kh_ns sw)" link add br0 type bridge &&
  kh_ip "$(kh_ns sw)" link set br0 up || { kh_down; return 1; }
  for ((i = 0; i < n; i++)); do kh_start_host "$i" || { kh_down; return 1; }; done
  for ((i = 0; i < n; i++)); do kh_wait_sshd "h$i" || { kh_down; return 1; }; done
  export KH_ID KH_DIR KH_NET KH_SSH_CONFIG
}

# Attach to a run started by `hosts.sh up` (CLI): sets the variables kh_up would.
kh_attach() {
  KH_ID=$1; KH_DIR=$KH_ROOT/$KH_PREFIX-$KH_ID
  [ -d "$KH_DIR" ] || { kh_die "no run '$KH_ID'"; return 1; }
  KH_NET=$(cat "$KH_DIR/net"); KH_SSH_CONFIG=$KH_DIR/ssh_config; KH_ON_DOWN=()
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  set -u
  cmd=${1:-}; shift || true
  case $cmd in
    up) kh_up "${1:?hosts.sh up N}" cli && echo "$KH_ID" ;;
    exec) kh_attach "${1:?ID}" && shift && kh_exec "$@" ;;
    ssh) kh_attach "${1:?ID}" && shift && kh_ssh "$@" ;;
    down)
      if [ "${1:-}" = --stale ]; then kh_down_stale
      else kh_teardown_id "${1:?hosts.sh down ID|--stale}"; fi ;;
    *) echo "usage: hosts.sh up N | exec ID H CMD... | ssh ID H CMD... | down ID | down --stale" >&2; exit 2 ;;
  esac
fi
