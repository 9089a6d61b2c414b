"""kolo.elastic.run_fn's retry loop, driven by real exceptions in a real
1-rank kolo world: what is restored, re-formed, called back and synced, in
which order; the reset limit; and that outside an elastic job nothing changes.

An elastic job is one with KOLO_WORKER_ID set; the tests set it after init()
(kolo's C++ side reads it there, to join a generation) and pass run_fn a
reset that records the re-formation instead of re-forming a 1-rank world."""
import pytest

import kolo
import kolo.torch as hvd
from kolo import basics
from kolo.elastic import HostsUpdatedInterrupt, ObjectState, run_fn

LOST = "kolo rank 0: allreduce: rank 1 (pid 4242) died"
MISMATCH = ("kolo rank 0: mismatched collectives at collective #6: rank 1 called broadcast(f32, 4, root=0) "
            "while rank 0 (this rank) called allreduce(f32, 4, sum); the communicator remains usable")


@pytest.fixture(scope="module", autouse=True)
def one_rank():
    hvd.init()
    yield
    hvd.shutdown()


@pytest.fixture
def elastic(monkeypatch):
    monkeypatch.setenv("KOLO_WORKER_ID", "test-worker")
    monkeypatch.delenv("KOLO_ELASTIC_RESET_LIMIT", raising=False)


class Recording(ObjectState):
    """An ObjectState that also lists what run_fn did to it."""

    def __init__(self, **kwargs):
        self.events = []
        super().__init__(**kwargs)
        self.register_reset_callbacks([lambda: self.events.append("callback")])

    def sync(self):
        self.events.append("sync")
        super().sync()

    def restore(self):
        self.events.append("restore")
        super().restore()


def trainer(failures):
    """func for run_fn: moves state.x on, then raises the next of failures (if any)."""
    def train(state, bonus):
        state.events.append(f"train x={state.x}")
        state.x += 1
        if failures:
            raise failures.pop(0)
        return state.x + bonus
    return train


def test_lost_peer_restores_re_forms_and_syncs(elastic):
    state = Recording(x=0)
    resets = []
    wrapped = run_fn(trainer([kolo.KoloError(LOST), hvd.HorovodInternalError(LOST)]),
                     lambda: resets.append(state.events.append("reset")))
    assert wrapped(state, 100) == 101
    assert len(resets) == 2
    assert state.events == ["sync", "train x=0", "restore", "reset", "callback",
                             "sync", "train x=0", "restore", "reset", "callback",
                             "sync", "train x=0"]


def test_hosts_updated_keeps_the_state_and_honours_skip_sync(elastic):
    state = Recording(x=0)
    wrapped = run_fn(trainer([HostsUpdatedInterrupt(), HostsUpdatedInterrupt(skip_sync=True)]),
                     lambda: state.events.append("reset"))
    assert wrapped(state, 0) == 3
    assert state.events == ["sync", "train x=0", "reset", "callback",
                            "sync", "train x=1", "reset", "callback",
                            "train x=2"]


def test_reset_limit(elastic, monkeypatch):
    state = Recording(x=0)
    resets = []
    last = kolo.KoloError(LOST + " (3)")
    wrapped = run_fn(trainer([kolo.KoloError(LOST), HostsUpdatedInterrupt(), last]),
                     lambda: resets.append(1), reset_limit=2)
    with pytest.raises(kolo.KoloError, match=r"giving up after 2 re-formation\(s\) \(reset limit 2\): "
                                              r".*died \(3\)") as caught:
        wrapped(state, 0)
    assert caught.value.__cause__ is last and len(resets) == 2

    monkeypatch.setenv("KOLO_ELASTIC_RESET_LIMIT", "0")
    with pytest.raises(kolo.KoloError, match=r"giving up after 0 re-formation\(s\) \(reset limit 0\)"):
        run_fn(trainer([kolo.KoloError(LOST)]), lambda: None)(Recording(x=0), 0)
    monkeypatch.setenv("KOLO_ELASTIC_RESET_LIMIT", "many")
    with pytest.raises(ValueError, match="KOLO_ELASTIC_RESET_LIMIT='many' is not an integer"):
        run_fn(trainer([]), lambda: None)
    with pytest.raises(ValueError, match="reset_limit must be a whole number >= 0, not -1"):
        run_fn(trainer([]), lambda: None, reset_limit=-1)


def test_errors_that_re_forming_cannot_cure_propagate(elastic):
    for error in [kolo.KoloError(MISMATCH), ValueError("kolo rank 0: allreduce: bad input")]:
        state = Recording(x=0)
        with pytest.raises(type(error)) as caught:
            run_fn(trainer([error]), lambda: pytest.fail("no reset"))(state, 0)
        assert caught.value is error and state.events == ["sync", "train x=0"]


def test_outside_an_elastic_job_errors_propagate_unchanged(monkeypatch):
    monkeypatch.delenv("KOLO_WORKER_ID", raising=False)
    for error in [kolo.KoloError(LOST), HostsUpdatedInterrupt()]:
        state = Recording(x=0)
        with pytest.raises(type(error)) as caught:
            run_fn(trainer([error]), lambda: pytest.fail("no reset"))(state, 0)
        assert caught.value is error and state.events == ["sync", "train x=0"]
    # hvd.elastic.run with its real reset (shutdown + init): never called here.
    state = Recording(x=4)
    assert hvd.elastic.run(trainer([]))(state, 10) == 15 and basics.is_initialized()


def test_host_check_outside_a_generation_never_raises(elastic):
    state = Recording(x=0)
    state.commit()  # elastic: rank 0's generation broadcast; this world has none (-1)
    assert state.sync_root() == 0


def test_bad_arguments():
    with pytest.raises(TypeError, match=r"run_fn\(func, reset\) takes two callables"):
        run_fn(None, lambda: None)
    with pytest.raises(TypeError, match="train's first argument must be a kolo.elastic.State .*not dict"):
        run_fn(trainer([]), lambda: None)({"x": 1}, 0)
