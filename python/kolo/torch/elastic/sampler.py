"""ElasticSampler: Horovod's sampler that shards an epoch over the ranks and,
after a re-formation, shards what is left of it over the new ranks.

Progress is one number per epoch: ``processed_num``, how many indices at the
head of the epoch's order are done. Every rank takes every ``size``-th index
of the indices left (``partition``), so after every rank has finished its
batch k, exactly the first (k+1)·batch_size·size of them are done — the same
count on every rank, whatever the world looked like before. That is why a
re-formation never skips an index nor repeats one: the new ranks shard the
rest of the same order. Unlike Horovod, the shards are not padded to equal
length (padding repeats indices): they differ by at most one index, so when
the split leaves one rank an extra (last) batch, call ``hvd.join()`` at the
end of the epoch as with any uneven data.
"""
import random

import torch.utils.data

from kolo import basics


def epoch_order(length, shuffle, seed, epoch):
    """The order of the epoch's indices: the same on every rank (seed + epoch)."""
    order = list(range(length))
    if shuffle:
        random.Random(seed + epoch).shuffle(order)
    return order


def partition(remaining, rank, size):
    """This rank's share of the indices left: every size-th one from its rank."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"kolo ElasticSampler: the number of ranks must be a positive integer, not {size!r}")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < size:
        raise ValueError(f"kolo ElasticSampler: rank {rank!r} is not in 0..{size - 1}")
    return list(remaining[rank::size])


def _count(what, value, least):
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"kolo ElasticSampler: {what} must be an integer >= {least}, not {value!r}")
    return value


class ElasticSampler(torch.utils.data.Sampler):
    """Horovod's ElasticSampler(dataset, shuffle=True, seed=0).

    Put it in the TorchState, call ``record_batch(batch_idx, batch_size)``
    after each batch (batch_idx counts from 0 in each pass over the loader)
    and ``set_epoch(epoch + 1)`` at the end of an epoch. ``rank`` and
    ``num_replicas`` (as torch's DistributedSampler) default to kolo's and are
    read again by reset()."""

    def __init__(self, dataset, shuffle=True, seed=0, *, rank=None, num_replicas=None):
        try:
            len(dataset)
        except TypeError:
            raise TypeError(f"kolo ElasticSampler: the dataset must have a length (an "
                            f"iterable-style dataset cannot be sharded): {type(dataset).__name__}") from None
        self.dataset = dataset
        self.shuffle = bool(shuffle)
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"kolo ElasticSampler: seed must be an integer, not {seed!r}")
        self.seed = seed
        self.epoch = 0
        self.processed_num = 0  # the first processed_num indices of the epoch's order are done
        self.processed_indices = set()  # record_indices(): done out of that order
        self.reset(rank=rank, num_replicas=num_replicas)

    def set_epoch(self, epoch):
        """Starts epoch `epoch` with nothing done. Call it at the END of an epoch,
        so that a re-formation within one never forgets what was done."""
        self.epoch = _count("epoch", epoch, 0)
        self.processed_num = 0
        self.processed_indices = set()
        self._new_round()

    def record_batch(self, batch_idx, batch_size):
        """Batches 0..batch_idx of this pass are done on every rank (call it on
        every rank, with the loader's batch_size). Calling it again is harmless."""
        _count("batch_idx", batch_idx, 0)
        _count("batch_size", batch_size, 1)
        done = min(len(self.remaining_indices), (batch_idx + 1) * batch_size * self.num_replicas)
        if done:
            self.processed_num = max(self.processed_num, self._positions[done - 1] + 1)
        self._recorded = True

    def record_indices(self, indices):
        """Marks indices done (from the next pass on). They are the job's
        progress: every rank must record the same ones (record_batch does)."""
        n = len(self.dataset)
        indices = list(indices)
        bad = [i for i in indices if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n]
        if bad:
            raise ValueError(f"kolo ElasticSampler: record_indices: {bad[:5]} are not indices of "
                             f"the dataset (0..{n - 1})")
        self.processed_indices.update(indices)
        self._recorded = True

    def state_dict(self):
        return dict(epoch=self.epoch, processed_num=self.processed_num,
                    processed_indices=sorted(self.processed_indices))

    def load_state_dict(self, state_dict):
        """Takes state_dict()'s progress (the rank and size stay; reset() reads them)."""
        if not isinstance(state_dict, dict) or "epoch" not in state_dict:
            raise ValueError("kolo ElasticSampler: load_state_dict needs a dict from state_dict() "
                             f"(with 'epoch'), got {state_dict!r:.200}")
        self.epoch = _count("epoch", state_dict["epoch"], 0)
        self.processed_num = _count("processed_num", state_dict.get("processed_num", 0), 0)
        self.processed_indices = set(state_dict.get("processed_indices", ()))
        self._new_round()

    def reset(self, rank=None, num_replicas=None):
        """Reads the world again (kolo's rank and size unless given) and shards
        the indices left over it."""
        self.num_replicas = basics.size() if num_replicas is None else num_replicas
        self.rank = basics.rank() if rank is None else rank
        partition([], self.rank, self.num_replicas)  # checks them
        self._new_round()

    def _new_round(self):
        """Shards the indices not done yet; a pass over the loader yields them."""
        order = epoch_order(len(self.dataset), self.shuffle, self.seed, self.epoch)
        self._positions = [p for p in range(self.processed_num, len(order))
                           if order[p] not in self.processed_indices]
        self.remaining_indices = [order[p] for p in self._positions]
        self.indices = partition(self.remaining_indices, self.rank, self.num_replicas)
        self.num_samples = len(self.indices)
        self._recorded = False

    def __iter__(self):
        if self._recorded:  # a second pass without a reset: only what is not done yet
            self._new_round()
        return iter(self.indices)

    def __len__(self):
        return self.num_samples
