"""ElasticSampler: every index of an epoch is processed and committed exactly
once while the world changes 3 -> 2 -> 3 mid-epoch, with commits, a failure
(restore to the last commit) and an added worker (no restore) in between.
Every rank of the changing world is driven in this one process: each is a
real ElasticSampler in a real TorchState, told its rank and size."""
import pytest
import torch

from kolo.torch.elastic import ElasticSampler, TorchState
from kolo.torch.elastic.sampler import epoch_order, partition

N, B, SEED = 103, 4, 7


def new_rank(rank, size):
    return TorchState(sampler=ElasticSampler(range(N), shuffle=True, seed=SEED, rank=rank, num_replicas=size))


def sync(states):
    """TorchState.sync's part for samplers: the root's progress, each rank's place."""
    progress = states[0].sampler.state_dict()
    for r, st in enumerate(states):
        st.sampler.load_state_dict(progress)
        st.sampler.reset(rank=r, num_replicas=len(states))
        st.save()


class Job:
    def __init__(self):
        self.committed, self.pending = [], []

    def train(self, states, phase, batches, commit_after=()):
        """Each rank runs `batches` batches of one pass (fewer where its shard
        ends), recording each; every rank commits after the batches in commit_after."""
        shards = [list(st.sampler) for st in states]
        for k in range(batches):
            for r, st in enumerate(states):
                batch = shards[r][k * B:(k + 1) * B]
                if batch:
                    self.pending += [(phase, k, j, r, i) for j, i in enumerate(batch)]
                    st.sampler.record_batch(k, B)
            if k in commit_after:
                for st in states:
                    st.commit()
                self.committed += self.pending
                self.pending = []
        return shards

    def fail(self, survivors):
        for st in survivors:
            st.restore()
        self.pending = []  # rolled back with the model: to be done again


def test_exactly_once_over_a_world_changing_3_2_3():
    job = Job()
    a, b, c = (new_rank(r, 3) for r in range(3))
    shards = job.train([a, b, c], 0, 5, commit_after={2})
    assert [len(s) for s in shards] == [35, 34, 34]
    assert len(job.committed) == 36 and len(job.pending) == 24

    job.fail([a, c])  # b is lost after batch 4: batches 3 and 4 are done again
    sync([a, c])
    assert a.sampler.processed_num == 36
    shards = job.train([a, c], 1, 4, commit_after={3})
    assert [len(s) for s in shards] == [34, 33]
    # A worker joins: the commit's check raises HostsUpdatedInterrupt, so no restore.
    d = new_rank(0, 1)
    sync([a, c, d])
    assert [st.sampler.processed_num for st in (a, c, d)] == [36 + 32] * 3
    shards = job.train([a, c, d], 2, 3, commit_after={2})
    assert [len(s) for s in shards] == [12, 12, 11]

    # In (phase, batch, offset, rank) order the committed indices are the epoch's order, each once.
    done = [i for *_, i in sorted(job.committed)]
    assert done == epoch_order(N, True, SEED, 0)
    assert sorted(done) == list(range(N))
    for st in (a, c, d):
        assert st.sampler.processed_num == N and list(st.sampler) == []


def test_partition_is_every_size_th_index_from_the_rank():
    remaining = list(range(100, 110))
    assert partition(remaining, 0, 3) == [100, 103, 106, 109]
    assert partition(remaining, 2, 3) == [102, 105, 108]
    assert sorted(sum((partition(remaining, r, 4) for r in range(4)), [])) == remaining
    assert partition([], 0, 2) == []
    for rank, size, text in [(3, 3, "rank 3 is not in 0..2"), (-1, 2, "rank -1"),
                             (0, 0, "must be a positive integer, not 0"), (0, 1.0, "not 1.0")]:
        with pytest.raises(ValueError, match=text):
            partition(remaining, rank, size)


def test_epoch_order():
    assert epoch_order(5, False, 0, 3) == [0, 1, 2, 3, 4]
    assert sorted(epoch_order(50, True, 1, 0)) == list(range(50))
    assert epoch_order(50, True, 1, 0) != epoch_order(50, True, 1, 1)
    assert epoch_order(50, True, 1, 1) == epoch_order(50, True, 2, 0)  # Horovod's seed + epoch


def test_record_batch_is_idempotent_and_a_second_pass_yields_only_the_rest():
    s = ElasticSampler(range(10), shuffle=False, rank=1, num_replicas=2)
    assert list(s) == [1, 3, 5, 7, 9] and len(s) == 5
    s.record_batch(0, 2)
    s.record_batch(0, 2)
    assert s.processed_num == 4
    assert list(s) == [5, 7, 9] and len(s) == 3  # ranks 0 and 1 did 0..3
    s.record_batch(5, 2)  # past the end: everything
    assert s.processed_num == 10 and list(s) == []
    s.set_epoch(1)
    assert s.epoch == 1 and s.processed_num == 0 and list(s) == [1, 3, 5, 7, 9]


def test_record_indices_and_state_dict_round_trip():
    s = ElasticSampler(range(10), shuffle=False, rank=0, num_replicas=2)
    s.record_indices([4, 0])
    assert list(s) == [1, 3, 6, 8]
    t = ElasticSampler(range(10), shuffle=False, rank=1, num_replicas=2)
    t.load_state_dict(s.state_dict())
    assert s.state_dict() == {"epoch": 0, "processed_num": 0, "processed_indices": [0, 4]}
    assert list(t) == [2, 5, 7, 9]


def test_bad_inputs_are_named():
    s = ElasticSampler(range(10), rank=0, num_replicas=1)
    with pytest.raises(ValueError, match="batch_idx must be an integer >= 0, not -1"):
        s.record_batch(-1, 4)
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1, not 0"):
        s.record_batch(0, 0)
    with pytest.raises(ValueError, match=r"record_indices: \[10\] are not indices of the dataset \(0..9\)"):
        s.record_indices([3, 10])
    with pytest.raises(ValueError, match="load_state_dict needs a dict from state_dict"):
        s.load_state_dict({"processed_num": 3})
    with pytest.raises(ValueError, match="epoch must be an integer >= 0"):
        s.set_epoch("1")
    with pytest.raises(ValueError, match="rank 2 is not in 0..1"):
        ElasticSampler(range(10), rank=2, num_replicas=2)

    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(range(3))
    with pytest.raises(TypeError, match="the dataset must have a length"):
        ElasticSampler(Stream(), rank=0, num_replicas=1)
