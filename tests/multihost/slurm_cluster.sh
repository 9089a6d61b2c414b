#!/usr/bin/env bash
# A real Slurm cluster on emulated hosts (source after hosts.sh): munged and slurmctld on h0,
# one slurmd per host, each under its host's own name. Everything lives under $KH_DIR/slurm and
# $KH_DIR/munge and every daemon runs inside a host, so kh_down removes all of it.
#
#   ks_up              after kh_up N: start munge, slurmctld, N slurmd; wait until all nodes idle
#   ks_exec CMD...     run a Slurm client command (srun, sbatch, squeue, ...) on h0, the login node
#   ks_logs            print the tails of the daemons' logs (for a failing test)
#   ks_leftovers RE    the processes on h0 and h1 whose command line matches RE, as
#                      "host:pid:command " each (empty: none; a job must leave nothing)
# Sets SLURM_CONF (exported, so kh_exec'd commands see it).
#
# Facts (Slurm 22.05, no systemd, no cgroups; ../../shared/tools/README.md): only
# proctrack/linuxproc tracks tasks here, with the cgroup tracker srun exits 0 and no task ran.
# The munge socket is a file, so slurmd in other network namespaces reach munged by its path.

ks_up() {
  local M=$KH_DIR/munge S=$KH_DIR/slurm h n cpus mem
  mkdir -p "$M"/{etc,run,lib,log} "$S"/{state,log,run}
  for h in "${KH_HOSTS[@]}"; do mkdir -p "$S/spool-$h"; done
  mungekey -c -k "$M/etc/munge.key" || return 1
  chown -R munge:munge "$M"
  chmod 755 "$M" "$M/run"; chmod 700 "$M/etc" "$M/lib" "$M/log"; chmod 400 "$M/etc/munge.key"
  kh_exec h0 runuser -u munge -- /usr/sbin/munged \
    --socket="$M/run/munge.socket.2" --key-file="$M/etc/munge.key" \
    --pid-file="$M/run/munged.pid" --log-file="$M/log/munged.log" \
    --seed-file="$M/lib/munged.seed" </dev/null >/dev/null 2>&1 || { kh_die "munged did not start"; return 1; }

  # Each node claims this machine's CPUs (tests oversubscribe with --overcommit).
  cpus=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)  # nproc alone honours OMP_NUM_THREADS
  mem=$(free -m | awk '/^Mem:/{print int($2 / 4)}')
  SLURM_CONF=$S/slurm.conf
  {
    cat <<EOF
ClusterName=kh$KH_ID
SlurmctldHost=h0($(kh_addr h0))
SlurmUser=root
AuthInfo=socket=$M/run/munge.socket.2
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool-%n
SlurmctldPidFile=$S/run/slurmctld.pid
SlurmdPidFile=$S/run/slurmd-%n.pid
SlurmctldLogFile=$S/log/slurmctld.log
SlurmdLogFile=$S/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MailProg=/bin/true
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0
ReturnToService=2
SlurmdTimeout=30
KillWait=5
EOF
    for h in "${KH_HOSTS[@]}"; do
      echo "NodeName=$h NodeAddr=$(kh_addr "$h") CPUs=$cpus RealMemory=$mem State=UNKNOWN"
    done
    echo "PartitionName=kh Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES"
  } > "$SLURM_CONF"
  export SLURM_CONF

  kh_exec h0 slurmctld -f "$SLURM_CONF" </dev/null >/dev/null 2>&1 || { kh_die "slurmctld did not start"; ks_logs; return 1; }
  for h in "${KH_HOSTS[@]}"; do
    kh_exec "$h" slurmd -f "$SLURM_CONF" -N "$h" </dev/null >/dev/null 2>&1 ||
      { kh_die "slurmd on $h did not start"; ks_logs; return 1; }
  done
  local want=${#KH_HOSTS[@]} states
  for n in $(seq 1 120); do
    states=$(ks_exec sinfo -h -N -o '%N %t' 2>/dev/null)
    [ "$(grep -c ' idle$' <<<"$states")" = "$want" ] && return 0
    sleep 0.5
  done
  kh_die "Slurm nodes not idle after 60 s: $states"
  ks_logs
  return 1
}

# Variables of an outer Slurm job (a CI runner inside an allocation) would make srun join it.
ks_exec() {
  local v unset=()
  for v in $(compgen -e); do [[ $v == SLURM_* && $v != SLURM_CONF ]] && unset+=(-u "$v"); done
  kh_exec h0 env "${unset[@]}" "$@"
}

ks_logs() {
  local f
  for f in "$KH_DIR"/slurm/log/*.log "$KH_DIR"/munge/log/*.log; do
    [ -f "$f" ] && { echo "--- $f"; tail -n 15 "$f"; }
  done >&2
}

ks_leftovers() {
  local h p left=""
  for h in h0 h1; do
    for p in $(kh_pids "$h"); do
      grep -qE "$1" "/proc/$p/cmdline" 2>/dev/null && left+="$h:$p:$(tr '\0' ' ' < "/proc/$p/cmdline") "
    done
  done
  echo "$left"
}
