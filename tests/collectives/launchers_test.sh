#!/usr/bin/env bash
# kolo::init() under each launcher's variables, set here by hand exactly as
# that launcher would, with 3 processes and no kolorun; then under a real
# mpirun. Each rank must report its own rank, the size, its local rank, and
# the correct allreduce sum 1+2+3 = 6. Last, a rank killed in host discovery:
# the next job removes the host token it left.
#   launchers_test.sh IDENTITY_BINARY
set -u
source "$(dirname "$0")/../private_shm.sh" "$@"  # a /dev/shm of its own (it checks all of it)
source "$(dirname "$0")/../common/ports.sh"
BIN=$1
N=3
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# expect NAME: compares the sorted output lines of the 3 ranks.
expect() {
  local name=$1
  sort "$tmp/out" > "$tmp/sorted"
  local want=""
  for ((r = 0; r < N; r++)); do
    want+="identity rank=$r size=$N local_rank=$r local_size=$N transport=${TRANSPORT:-shm} sum=6"$'\n'
  done
  if [ "$(cat "$tmp/sorted")" == "${want%$'\n'}" ]; then
    echo "ok: $name"
  else
    echo "FAILED: $name"; echo "--- got:"; cat "$tmp/sorted"; echo "--- errors:"; cat "$tmp/err"; echo "--- wanted:"; printf "%s" "$want"
    fail=1
  fi
}

# run_ranks VARS_FUNCTION: starts N processes with the variables the function prints for rank r.
run_ranks() {
  local vars=$1
  : > "$tmp/out"; : > "$tmp/err"
  local pids=()
  for ((r = 0; r < N; r++)); do
    # No wrapper between this shell and the rank: under Open MPI/MPICH variables
    # the ranks find each other through their common parent.
    env $($vars $r) KOLO_RENDEZVOUS_TIMEOUT_MS=30000 "$BIN" >> "$tmp/out" 2>> "$tmp/err" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
}

port=$(test_port)
step=$RANDOM
torchrun_vars() { echo "RANK=$1 WORLD_SIZE=$N LOCAL_RANK=$1 LOCAL_WORLD_SIZE=$N MASTER_ADDR=127.0.0.1 MASTER_PORT=$port"; }
ompi_vars()     { echo "OMPI_COMM_WORLD_RANK=$1 OMPI_COMM_WORLD_SIZE=$N OMPI_COMM_WORLD_LOCAL_RANK=$1 OMPI_COMM_WORLD_LOCAL_SIZE=$N"; }
mpich_vars()    { echo "PMI_RANK=$1 PMI_SIZE=$N MPI_LOCALRANKID=$1 MPI_LOCALNRANKS=$N"; }
# The node list names this host by address: a bare container may not resolve "localhost".
slurm_vars()    { echo "SLURM_PROCID=$1 SLURM_NTASKS=$N SLURM_LOCALID=$1 SLURM_NTASKS_PER_NODE=$N SLURM_STEP_NODELIST=127.0.0.1 SLURM_JOB_ID=$$ SLURM_STEP_ID=$step"; }
kolo_vars()     { echo "KOLO_RANK=$1 KOLO_SIZE=$N KOLO_LOCAL_RANK=$1 KOLO_LOCAL_SIZE=$N KOLO_STORE_ADDR=127.0.0.1:$port KOLO_JOB_ID=t$$"; }

run_ranks torchrun_vars; expect "torchrun-style variables (rank 0 hosts the store at MASTER_ADDR:MASTER_PORT)"
run_ranks ompi_vars;     expect "Open MPI variables (store found through a file keyed by the parent)"
run_ranks mpich_vars;    expect "MPICH/Hydra variables"
run_ranks slurm_vars;    expect "Slurm variables (store on the first host of SLURM_STEP_NODELIST)"
TRANSPORT=tcp KOLO_TRANSPORT=tcp run_ranks torchrun_vars; TRANSPORT=tcp expect "torchrun-style variables over TCP"

# A real mpirun (Open MPI), no kolorun.
if command -v mpirun >/dev/null; then
  mpirun --allow-run-as-root --oversubscribe -np $N "$BIN" > "$tmp/out" 2> "$tmp/err"
  expect "a real mpirun -np $N"
else
  echo "FAILED: mpirun not found (scripts/install-deps.sh installs openmpi-bin)"; fail=1
fi

# A rank SIGKILLed while it waits in host discovery (its peers never come)
# cannot remove its host token; the next job's discovery on this host does
# (no launcher's job id names it, so no launcher could sweep it).
port=$((port + 1))
env $(torchrun_vars 0) KOLO_RENDEZVOUS_TIMEOUT_MS=30000 "$BIN" > /dev/null 2>&1 &
lone=$!
for _ in $(seq 300); do ls /dev/shm | grep -q -- '-host-' && break; sleep 0.1; done
kill -9 "$lone"; wait "$lone" 2> /dev/null
if ! ls /dev/shm | grep -q '^kolo-job-host-'; then
  echo "FAILED: the lone rank made no host token to leave behind (the case did not happen)"; fail=1
fi
port=$((port + 1))
run_ranks torchrun_vars; expect "the next job after a rank killed in host discovery"
ls /dev/shm | grep -q -- '-host-' && { echo "FAILED: the killed rank's host token is still there"; fail=1; }

ls /dev/shm | grep -q '^kolo-' && { echo "FAILED: shared memory segments left in /dev/shm:"; ls /dev/shm | grep '^kolo-'; fail=1; }
exit $fail
