"""TorchState: Horovod's state of a PyTorch training process for kolo's
elastic ``run``: models, optimizers and ElasticSamplers by handler, every
other keyword argument as a plain value (kolo.elastic.ObjectState).

save() keeps deep copies of the state dicts in host memory; restore() loads
them back (bit-identical); sync() sends the root's current state (parameters
and buffers with broadcast_parameters, the optimizer with
broadcast_optimizer_state, samplers and plain values with broadcast_object)
and then saves it, so every rank's committed state is the same.
"""
import copy

import torch

from kolo.elastic import ObjectState
from kolo.torch.elastic.sampler import ElasticSampler
from kolo.torch.functions import broadcast_object, broadcast_optimizer_state, broadcast_parameters


class _Handler:
    """Keeps one object's committed state_dict."""

    def __init__(self, value):
        self.value = value
        self.save()

    def save(self):
        self.saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self.saved)


class _ModelHandler(_Handler):
    def sync(self, root):
        broadcast_parameters(self.value.state_dict(), root_rank=root)


class _OptimizerHandler(_Handler):
    def sync(self, root):
        broadcast_optimizer_state(self.value, root_rank=root)


class _SamplerHandler(_Handler):
    def sync(self, root):
        self.value.load_state_dict(broadcast_object(self.value.state_dict(), root_rank=root))
        self.value.reset()  # this rank's place in the new world

    def restore(self):
        self.value.load_state_dict(self.saved)


# The first matching class wins (a DistributedOptimizer is a torch Optimizer).
HANDLERS = [(torch.nn.Module, _ModelHandler), (torch.optim.Optimizer, _OptimizerHandler),
            (ElasticSampler, _SamplerHandler)]


def _handler(value):
    return next((h(value) for cls, h in HANDLERS if isinstance(value, cls)), None)


class TorchState(ObjectState):
    """Horovod's ``TorchState(model=None, optimizer=None, **kwargs)``: every
    keyword argument becomes an attribute (``state.model``, ``state.epoch``)."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        kwargs.update(model=model, optimizer=optimizer)
        handlers = {name: _handler(v) for name, v in kwargs.items()}
        # Set before ObjectState's attributes, so that __setattr__ sees them.
        object.__setattr__(self, "_handlers", {n: h for n, h in handlers.items() if h is not None})
        plain = {name: v for name, v in kwargs.items() if handlers[name] is None}
        for name, h in self._handlers.items():
            object.__setattr__(self, name, h.value)
        super().__init__(bcast_object=broadcast_object, **plain)

    def save(self):
        for h in self._handlers.values():
            h.save()
        super().save()

    def restore(self):
        for h in self._handlers.values():
            h.restore()
        super().restore()

    def sync(self):
        root = self.sync_root()
        for h in self._handlers.values():
            h.sync(root)
        self._sync_values(root)
        self.save()
        self.synced()

    def __setattr__(self, name, value):
        """Assigning a new model/optimizer/sampler to a handled name tracks the new
        one (and commits its state, as Horovod does)."""
        handlers = self.__dict__.get("_handlers", {})
        if name in handlers:
            h = _handler(value)
            if h is None:
                raise TypeError(f"kolo TorchState: {name} holds a {type(handlers[name].value).__name__}; "
                                f"it cannot become a {type(value).__name__}")
            handlers[name] = h
        super().__setattr__(name, value)
