#!/usr/bin/env bash
# PyTorch Lightning on kolo under srun: real Slurm on two emulated hosts h0, h1
# (tests/multihost/slurm_cluster.sh), srun -N 2 --ntasks-per-node=2, so 4 ranks, 2 per host.
# workers/lightning_train.py fits, checkpoints and tests; workers/lightning_check.py checks the
# results as test_lightning.py does (ranks agree, weights = the single-process reference,
# sync_dist means, rank 0's checkpoint, Trainer.test's totals), here with 2 hosts: Lightning's
# SLURMEnvironment, kolo's hierarchical communicator (cross size 2). One case per run:
#   lightning_slurm_test.sh ddp_kolo      Trainer(strategy="ddp_kolo"): Lightning picks its
#                                         SLURMEnvironment, kolo joins through torch's store
#   lightning_slurm_test.sh kolo-first    the same after kolo.torch.init(): kolo's own discovery
#                                         (SLURM_PROCID ...) formed the communicator first, and
#                                         Lightning's ranks must be the same
#   lightning_slurm_test.sh DDPStrategy   DDPStrategy(process_group_backend="kolo"), the one-line
#                                         change a Lightning user makes
# Needs root (skips with 77 otherwise), KOLO_TEST_BUILD_DIR (set by ctest; default build/) and
# KOLO_TORCH2_PYTHON (default: scripts/install-torch.sh's venv) with pytorch-lightning.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
case=${1:?usage: lightning_slurm_test.sh ddp_kolo|kolo-first|DDPStrategy}
B=${KOLO_TEST_BUILD_DIR:-$REPO/build}
PY=${KOLO_TORCH2_PYTHON:-${XDG_CACHE_HOME:-$HOME/.cache}/kolo/venvs/torch-2.15.0/bin/python}
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
"$PY" -c "import pytorch_lightning" 2>/dev/null || { echo "SKIP: $PY has no pytorch_lightning"; exit 77; }
[ -e "$B/python/kolo/lightning.py" ] || { echo "FAIL: no $B/python/kolo/lightning.py"; exit 1; }
case $case in
  ddp_kolo) options=(--strategy ddp_kolo) ;;
  kolo-first) options=(--strategy ddp_kolo --kolo-init-first) ;;
  DDPStrategy) options=(--strategy kolo) ;;
  *) echo "unknown case '$case'"; exit 2 ;;
esac

source "$REPO/tests/multihost/hosts.sh"
source "$REPO/tests/multihost/slurm_cluster.sh"
WORK=$(mktemp -d /tmp/lightning-slurm.XXXXXX)
kh_on_down "rm -rf '$WORK'"
kh_up 2 || exit 1
ks_up || exit 1
# srun hands the ranks this environment (--export=ALL). One torch thread per rank: 4 share 2 cores.
export PYTHONPATH=$B/python PYTHONDONTWRITEBYTECODE=1 OMP_NUM_THREADS=1
unset MASTER_ADDR MASTER_PORT RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE NODE_RANK PL_GLOBAL_SEED
for v in $(compgen -e); do [[ $v == KOLO_* || $v == TORCHELASTIC_* ]] && unset "$v"; done

fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
ok() { echo "ok   $*"; }

# Nothing of the job may outlive it, on either host.
leftovers() { ks_leftovers 'lightning_train|slurmstepd'; }

mkdir -p "$WORK/out"
start=$(date +%s)
# -K: the first rank that fails ends the step rather than the others waiting for a deadline.
ks_exec timeout 500 srun -N 2 --ntasks-per-node=2 --overcommit -K -l \
  "$PY" "$HERE/workers/lightning_train.py" "$WORK/out" --num-nodes 2 "${options[@]}" >"$WORK/srun.out" 2>&1
rc=$?
secs=$(( $(date +%s) - start ))
if [ "$rc" = 0 ]; then ok "srun exits 0 ($secs s)"; else fail "srun exits 0 (rc $rc after $secs s)"; fi
place=$(sed -n 's/^\([0-9]\): lightning_train rank \([0-9]\) of 4: done$/\1=\2/p' "$WORK/srun.out" |
        sort | tr '\n' ' ')
if [ "$place" = "0=0 1=1 2=2 3=3 " ]; then ok "every task finished as the Lightning rank of its SLURM_PROCID"
else fail "every task finished as the Lightning rank of its SLURM_PROCID ($place)"; fi
if check=$(cd "$HERE/workers" && "$PY" lightning_check.py "$WORK/out" 4 --environment SLURMEnvironment \
              --hosts 2 2>&1); then
  echo "$check"
else
  fail "the results: $(tail -n 3 <<<"$check")"
fi
# The ranks on h1 are on the second node for kolo and for Lightning alike.
if "$PY" - "$WORK/out" <<'EOF'
import json, sys
for r in range(4):
  s = json.load(open(f"{sys.argv[1]}/rank{r}.json"))
  assert s["launcher"]["SLURM_PROCID"] == str(r), s["launcher"]
  assert s["kolo"]["transport"] == "hier", s["kolo"]
EOF
then ok "kolo runs hierarchically; every rank is its SLURM_PROCID"; else fail "hierarchical, SLURM_PROCID"; fi
for _ in $(seq 1 40); do [ -z "$(leftovers)" ] && break; sleep 0.25; done
left=$(leftovers)
if [ -z "$left" ]; then ok "nothing left on either host"; else fail "nothing left on either host: $left"; fi
[ "$fails" = 0 ] || { tail -n 80 "$WORK/srun.out"; ks_logs; }

[ "$fails" = 0 ] && echo "lightning_slurm_test $case: all passed" ||
  echo "lightning_slurm_test $case: $fails failed"
exit $((fails > 0))
