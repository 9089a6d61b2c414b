"""TorchState and ObjectState: save/restore round trips are bit-identical
(parameters, buffers, optimizer state, plain values); sync in a real 1-rank
kolo world; reset callbacks; bad inputs."""
import io

import pytest
import torch

import kolo.torch as hvd
from kolo.elastic import ObjectState


@pytest.fixture(scope="module", autouse=True)
def one_rank():
    hvd.init()  # no launcher variables: a 1-rank job
    yield
    hvd.shutdown()


def snapshot(obj):
    buf = io.BytesIO()
    torch.save(obj.state_dict(), buf)
    buf.seek(0)
    return torch.load(buf)


def same(a, b):
    """Equal structure, and tensors equal bit for bit (with dtype and shape)."""
    if isinstance(a, torch.Tensor):
        return (isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape
                and torch.equal(a.view(torch.uint8) if a.dim() else a, b.view(torch.uint8) if b.dim() else b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def make(distributed):
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.BatchNorm1d(7), torch.nn.Linear(7, 2))
    opt = torch.optim.Adam(model.parameters(), lr=0.01, amsgrad=True)
    if distributed:
        opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    return model, opt


def step(model, opt, seed):
    g = torch.Generator().manual_seed(seed)
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(torch.randn(8, 5, generator=g)), torch.randn(8, 2, generator=g)).backward()
    opt.step()


@pytest.mark.parametrize("distributed", [False, True])
def test_restore_is_bit_identical_and_training_repeats_exactly(distributed):
    model, opt = make(distributed)
    for s in range(3):
        step(model, opt, s)
    state = hvd.elastic.TorchState(model, opt, epoch=3, batch=7)
    state.commit()
    saved_model, saved_opt = snapshot(model), snapshot(opt)
    step(model, opt, 100)
    after_one = snapshot(model)
    step(model, opt, 101)
    state.epoch, state.batch = 4, 0
    assert not same(snapshot(model), saved_model)

    state.restore()
    assert same(snapshot(model), saved_model) and same(snapshot(opt), saved_opt)
    assert (state.epoch, state.batch) == (3, 7)
    assert state.model is model and opt.param_groups[0]["params"][0] is model[0].weight
    step(model, opt, 100)  # the same step again: the same result, bit for bit
    assert same(snapshot(model), after_one)


def test_sync_in_a_one_rank_world_commits_the_synced_state():
    model, opt = make(True)
    state = hvd.elastic.TorchState(model=model, optimizer=opt, epoch=0)
    state.sync()  # the fresh optimizer takes Horovod's zero-gradient step: its state exists now
    assert snapshot(opt)["state"]
    state.epoch = 5
    step(model, opt, 1)
    state.sync()
    synced = snapshot(model), snapshot(opt)
    step(model, opt, 2)
    state.epoch = 6
    state.restore()
    assert same(snapshot(model), synced[0]) and same(snapshot(opt), synced[1]) and state.epoch == 5


def test_a_new_model_assigned_to_the_state_is_tracked():
    model, opt = make(False)
    state = hvd.elastic.TorchState(model, opt)
    other, _ = make(False)
    state.model = other
    state.save()
    kept = snapshot(other)
    with torch.no_grad():
        other[0].weight.add_(1)
    state.restore()
    assert same(snapshot(other), kept)
    with pytest.raises(TypeError, match="model holds a Sequential; it cannot become a int"):
        state.model = 5


def test_object_state_and_reset_callbacks():
    state = ObjectState(epoch=1, names=["a"])
    state.epoch, state.names = 2, ["a", "b"]
    state.restore()
    assert (state.epoch, state.names) == (1, ["a"])
    state.epoch = 9
    state.commit()  # outside an elastic job: save(), and the host check never raises
    state.epoch = 10
    state.restore()
    assert state.epoch == 9
    calls = []
    state.register_reset_callbacks([lambda: calls.append("lr"), lambda: calls.append("log")])
    state.on_reset()
    assert calls == ["lr", "log"]
    with pytest.raises(TypeError, match="register_reset_callbacks: 3 is not callable"):
        state.register_reset_callbacks([3])
    state.sync()  # 1 rank: the values stay
    assert state.epoch == 9
