"""Horovod Elastic on kolo: ``hvd.elastic.run``, ``hvd.elastic.TorchState``,
``hvd.elastic.ElasticSampler`` after ``import kolo.torch as hvd``.

kolo/elastic.py says how re-formation works; python/README.md ("Elastic")
what differs from Horovod.
"""
from kolo.elastic import (HorovodInternalError, HostsUpdatedInterrupt, KoloError, ObjectState,
                          State, run, run_fn)
from kolo.torch.elastic.sampler import ElasticSampler
from kolo.torch.elastic.state import TorchState


__all__ = ["run", "TorchState", "ElasticSampler", "ObjectState", "State", "HorovodInternalError",
           "HostsUpdatedInterrupt", "KoloError", "run_fn"]
