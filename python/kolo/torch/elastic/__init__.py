"""Horovod Elastic on kolo: ``hvd.elastic.run``, ``hvd.elastic.TorchState``,
``hvd.elastic.ElasticSampler`` after ``import kolo.torch as hvd``.

kolo/elastic.py says how re-formation works; python/README.md ("Elastic")
what differs from Horovod.
"""
from kolo import basics
from kolo.elastic import (HorovodInternalError, HostsUpdatedInterrupt, KoloError, ObjectState,
                          State, run_fn)
from kolo.torch.elastic.sampler import ElasticSampler
from kolo.torch.elastic.state import TorchState


def run(func):
    """Horovod's decorator: ``func(state, ...)`` runs with its state synced
    from the root first, and again after every re-formation (a lost peer:
    restore the last commit; added workers: keep the current state).

    Do not issue collectives before calling the decorated function: a worker
    that joins later would not issue them."""
    return run_fn(func, _reset)


def _reset():
    """Leaves the failed (or outdated) communicator and joins the newest
    generation of the job (blocks until kolorun publishes one listing us)."""
    basics.shutdown()
    basics.init()


__all__ = ["run", "TorchState", "ElasticSampler", "ObjectState", "State", "HorovodInternalError",
           "HostsUpdatedInterrupt", "KoloError", "run_fn"]
