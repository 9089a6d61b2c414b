"""PyTorch Lightning on kolo: ``import kolo.lightning``, then ``Trainer(strategy="ddp_kolo")``.

Two pieces, both on Lightning's documented extension points (a strategy name
in its ``StrategyRegistry``, a ``ClusterEnvironment`` plugin); nothing of
Lightning is patched:

``"ddp_kolo"`` (``KoloDDPStrategy``)
    Lightning's ``DDPStrategy`` with ``process_group_backend="kolo"``, the
    torch.distributed backend that ``import kolo.torch`` registers (this module
    imports it). Registered on import. Under kolorun it brings its own
    ``KoloEnvironment``; elsewhere Lightning picks the environment as for
    ``"ddp"``: its own launcher (``python train.py`` starts the other ranks),
    ``SLURMEnvironment`` under srun, ``TorchElasticEnvironment`` under torchrun.

``KoloEnvironment``
    The ranks kolorun started: rank, world size and local rank are kolorun's
    KOLO_* variables, the ones kolo's own discovery reads first, so Lightning
    and kolo agree on who is who; a Trainer whose devices/num_nodes disagree
    with kolorun's hosts is told what to pass. Not needed for a plain
    ``DDPStrategy(process_group_backend="kolo")``: kolorun also sets torchrun's
    variables (TORCHELASTIC_RUN_ID, RANK, LOCAL_RANK, MASTER_ADDR, ...), so
    Lightning's own detection picks its ``TorchElasticEnvironment`` and starts
    no ranks of its own, as under torchrun. Pass it as a plugin
    (``plugins=[KoloEnvironment()]``) where Lightning would pick another
    environment: inside a Slurm allocation, a Lightning that checks
    SLURMEnvironment before TorchElasticEnvironment (2.6.6 checks
    TorchElasticEnvironment first).

Under srun no kolo environment is needed: Lightning's ``SLURMEnvironment``
reads the same SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID that kolo's
discovery reads, and torch's store (Lightning's MASTER_ADDR/MASTER_PORT)
carries the address of kolo's own store (kolo/torch/process_group_rendezvous.py).

Needs ``pytorch_lightning`` (2.x); the unified ``lightning`` package keeps
its own registry and classes and is not served by this module.
"""

try:
    from lightning_fabric.plugins.environments import ClusterEnvironment
    from pytorch_lightning.strategies import DDPStrategy, StrategyRegistry
except ImportError as e:  # pragma: no cover - depends on the installation
    raise ImportError(f"kolo.lightning needs pytorch-lightning 2.x (pip install pytorch-lightning): {e}") from e

import torch
from torch.distributed import ReduceOp

import kolo.torch  # noqa: F401  registers the torch.distributed backend "kolo"
from kolo import basics, settings
from kolo.torch.process_group_rendezvous import _free_port, broadcast_endpoint

__all__ = ["KoloEnvironment", "KoloDDPStrategy"]

def _int_var(name):
    value = settings.kolorun_var(name)
    if not value:
        raise RuntimeError(f"kolo.lightning: {name} is not set; KoloEnvironment serves processes "
                           "started by kolorun, which sets it")
    try:
        return int(value)
    except ValueError:
        raise RuntimeError(f"kolo.lightning: {name}={value} is not an integer") from None


class KoloEnvironment(ClusterEnvironment):
    """The ranks of a kolorun job (``kolorun -np N`` or ``-H host:n,...``)."""

    def __init__(self):
        super().__init__()
        self._main = None  # (address, port) of torch's store, agreed through kolo

    @property
    def creates_processes_externally(self):
        return True  # kolorun started every rank

    @staticmethod
    def detect():
        # kolo's discovery takes kolo's variables when either of these is set.
        return settings.started_by_kolorun()

    def world_size(self):
        return _int_var("KOLO_SIZE")

    def set_world_size(self, size):
        pass  # kolorun fixed it; validate_settings reports a Trainer that disagrees

    def global_rank(self):
        return _int_var("KOLO_RANK")

    def set_global_rank(self, rank):
        pass  # as set_world_size

    def local_rank(self):
        return _int_var("KOLO_LOCAL_RANK")

    def node_rank(self):
        # kolorun fills hosts in order (tools/kolorun/hosts.h) and
        # validate_settings checks that every host runs `devices` ranks, so
        # the host's index is the rank divided by the ranks per host.
        return self.global_rank() // _int_var("KOLO_LOCAL_SIZE")

    def validate_settings(self, num_devices, num_nodes):
        size, local = self.world_size(), _int_var("KOLO_LOCAL_SIZE")
        if num_devices != local or num_devices * num_nodes != size:
            raise ValueError(
                f"kolo.lightning: kolorun started {size} ranks, {local} on this host, but the Trainer has "
                f"devices={num_devices}, num_nodes={num_nodes}; pass devices={local}, "
                f"num_nodes={size // local if size % local == 0 else '(ranks per host differ)'}")

    # torch's store (Lightning sets MASTER_ADDR/MASTER_PORT from these and
    # calls init_process_group on every rank): rank 0 hosts it. kolorun's own
    # store speaks kolo's protocol, not torch's, so rank 0 picks a free port
    # and sends its address to the others over kolo's communicator, which the
    # "kolo" backend then uses as its group. Lightning reads both properties
    # on every rank at the same point (just before init_process_group), so
    # this broadcast is issued in the same order everywhere.
    @property
    def main_address(self):
        return self._endpoint()[0]

    @property
    def main_port(self):
        return self._endpoint()[1]

    def _endpoint(self):
        if self._main is None:
            basics.init()
            self._main = broadcast_endpoint(basics.comm_of_world(), _free_port())
        return self._main


def _is_mean(reduce_op):
    if isinstance(reduce_op, str):
        return reduce_op.lower() in ("mean", "avg")
    return reduce_op == ReduceOp.AVG


class KoloDDPStrategy(DDPStrategy):
    """``DDPStrategy`` on the "kolo" backend; under kolorun with ``KoloEnvironment``."""

    strategy_name = "ddp_kolo"

    def __init__(self, *args, process_group_backend="kolo", cluster_environment=None, **kwargs):
        # Checked here, not through Lightning's detection, which knows only its
        # own environments; kolorun's variables come first, as in kolo's discovery.
        if cluster_environment is None and KoloEnvironment.detect():
            cluster_environment = KoloEnvironment()
        super().__init__(*args, process_group_backend=process_group_backend,
                         cluster_environment=cluster_environment, **kwargs)

    def reduce(self, tensor, group=None, reduce_op="mean"):
        # Every sync_dist mean Lightning logs also averages the batch sizes, an
        # integer tensor, with ReduceOp.AVG, which truncates on integers (kolo
        # as NCCL; Lightning's gloo path divides and truncates too): ranks with
        # different batch sizes (an uneven last batch) would skew the mean.
        # Averaged in float64 they come out exact, and Lightning divides by
        # the result it gets back.
        if isinstance(tensor, torch.Tensor) and not tensor.is_floating_point() and _is_mean(reduce_op):
            tensor = tensor.to(torch.float64)
        return super().reduce(tensor, group=group, reduce_op=reduce_op)

    @classmethod
    def register_strategies(cls, strategy_registry):
        if cls.strategy_name not in strategy_registry:  # this module imported again
            strategy_registry.register(cls.strategy_name, cls,
                                       description="DDP on kolo's torch.distributed backend \"kolo\"")


KoloDDPStrategy.register_strategies(StrategyRegistry)
