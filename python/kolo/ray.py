"""Ray Train on kolo: ``TorchTrainer(..., torch_config=kolo.ray.KoloConfig())``.

Ray's TorchConfig already passes any backend name to ``init_process_group``;
what it cannot know is that the name "kolo" exists only once ``import
kolo.torch`` ran in the worker process, and Ray calls ``init_process_group``
before the training function starts, so the user's own import comes too
late. KoloConfig is a TorchConfig whose backend (Ray Train's documented
extension point, ``ray.train.backend.Backend``) imports kolo.torch on every
worker and then hands over to Ray's own torch backend, unchanged: Ray sets
MASTER_ADDR/MASTER_PORT, RANK and WORLD_SIZE from its worker placement,
torch's env:// store forms, and kolo's communicator takes its rank from
torch's (process_group_rendezvous.py), so kolo rank == Ray's world rank.

    from ray.train.torch import TorchTrainer
    from kolo.ray import KoloConfig

    trainer = TorchTrainer(train_func, scaling_config=ScalingConfig(num_workers=2),
                           torch_config=KoloConfig())

The workers must be able to import kolo (installed, or PYTHONPATH in the
environment of ``ray start`` / the driver that starts the cluster).
"""
from dataclasses import dataclass

from ray.train.backend import Backend
from ray.train.torch import TorchConfig


def _register_kolo_backend():
    """Runs in each worker: registers "kolo" with torch.distributed there."""
    import kolo.torch  # noqa: F401


class _KoloBackend(Backend):
    """Ray's torch backend with kolo registered on the workers first."""

    def __init__(self):
        # Ray's own torch backend, reached through TorchConfig's public
        # backend_cls: its rendezvous is exactly what kolo needs.
        self._torch = TorchConfig().backend_cls()
        self.share_cuda_visible_devices = self._torch.share_cuda_visible_devices

    def on_start(self, worker_group, backend_config):
        if backend_config.backend != "kolo":
            raise ValueError(f"KoloConfig(backend={backend_config.backend!r}): KoloConfig runs the "
                             "'kolo' backend only; use ray.train.torch.TorchConfig for other backends")
        worker_group.execute(_register_kolo_backend)
        self._torch.on_start(worker_group, backend_config)

    def on_training_start(self, worker_group, backend_config):
        self._torch.on_training_start(worker_group, backend_config)

    def on_shutdown(self, worker_group, backend_config):
        self._torch.on_shutdown(worker_group, backend_config)


@dataclass
class KoloConfig(TorchConfig):
    """TorchConfig with backend "kolo" (init_method and timeout_s as TorchConfig's;
    kolo's own collective deadline is KOLO_TIMEOUT_MS)."""

    backend: str = "kolo"

    @property
    def backend_cls(self):
        return _KoloBackend
