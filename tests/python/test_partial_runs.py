"""Forward and backward as separate calls: stash lifetimes, several RunStates at once, seeded dropout."""

import numpy as np
import onnx
import pytest
import torch

import onnxtrain
from export_util import export_training
from models import GPT, WithLoss

AXES = {"idx": {0: "batch", 1: "seq"}, "target": {0: "batch", 1: "seq"}}


@pytest.fixture(scope="module")
def gpt(tmp_path_factory):
    torch.manual_seed(0)
    module = WithLoss(GPT(vocab=65, dim=32, heads=4, layers=2, block=32, dropout=0.1)).train()
    idx = torch.randint(0, 65, (4, 16))
    path = export_training(module, (idx, idx), str(tmp_path_factory.mktemp("gpt") / "gpt.onnx"), ["idx", "target"],
                           AXES, ["loss"])
    model = onnx.load(path)
    wrt = [i.name for i in model.graph.initializer if i.name in dict(module.named_parameters())]
    session = onnxtrain.Session.for_training(model.SerializeToString(), wrt, "loss")
    feeds = {"idx": idx.numpy(), "target": torch.roll(idx, 1, 1).numpy()}
    return session, feeds


def test_dropping_a_run_state_frees_its_stash(gpt):
    session, feeds = gpt
    base = onnxtrain.allocator_stats()["allocated"]
    _, state = session.run_forward(feeds)
    held = onnxtrain.allocator_stats()["allocated"] - base
    assert state.stash_bytes > 0
    assert held >= state.stash_bytes
    del state
    assert onnxtrain.allocator_stats()["allocated"] - base < held


def test_several_run_states_alive_at_once(gpt):
    session, feeds = gpt
    other = {"idx": np.flip(feeds["idx"], 1).copy(), "target": feeds["target"]}
    _, s1 = session.run_forward(feeds, seed=1)
    _, s2 = session.run_forward(other, seed=2)
    g2 = session.run_backward(s2)
    g1 = session.run_backward(s1)
    _, again = session.run_forward(feeds, seed=1)
    ref = session.run_backward(again)
    for name in g1:
        np.testing.assert_array_equal(g1[name], ref[name])
        assert not np.array_equal(g1[name], g2[name]) or np.abs(g1[name]).max() == 0
    with pytest.raises(onnxtrain.Error, match="already used"):
        session.run_backward(s1)


def test_the_same_seed_gives_bit_identical_dropout(gpt):
    session, feeds = gpt
    a, _ = session.run_forward(feeds, seed=42)
    b, _ = session.run_forward(feeds, seed=42)
    c, _ = session.run_forward(feeds, seed=43)
    assert a["loss"] == b["loss"]
    assert a["loss"] != c["loss"]
