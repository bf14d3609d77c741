"""Random ops (RandomUniform[Like], RandomNormal[Like], Bernoulli): their distributions, draws fixed by the step's
seed and bit-identical under recompute, no gradient through them, and PyTorch's rand/randn/bernoulli captured
into them (drop-path as timm and transformers write it)."""

import numpy as np
import pytest
import torch
from onnx import TensorProto as TP
from onnx import helper as h

import onnxtrain

X = h.make_tensor_value_info("x", TP.FLOAT, ["a", "b"])


def session(node, inputs, out_type=TP.FLOAT):
    g = h.make_graph([node], "g", inputs, [h.make_tensor_value_info("y", out_type, None)])
    return onnxtrain.Session.from_bytes(h.make_model(g, opset_imports=[h.make_opsetid("", 22)]).SerializeToString())


def test_uniform_and_normal_draw_their_distributions():
    y = session(h.make_node("RandomUniformLike", ["x"], ["y"], low=-2.0, high=3.0), [X]).run(
        {"x": np.zeros((200, 500), np.float32)})["y"]
    assert y.shape == (200, 500) and y.dtype == np.float32 and -2 <= y.min() and y.max() < 3
    assert abs(y.mean() - 0.5) < 0.03 and abs(y.var() - 25 / 12) < 0.05
    assert np.histogram(y, bins=10, range=(-2, 3))[0].min() > 9000  # (10000 each)
    z = session(h.make_node("RandomNormal", [], ["y"], shape=[100000], mean=1.0, scale=2.0, dtype=TP.DOUBLE), [],
                TP.DOUBLE).run({})["y"]
    assert z.dtype == np.float64 and abs(z.mean() - 1) < 0.03 and abs(z.std() - 2) < 0.03
    assert abs((np.abs(z - 1) < 2).mean() - 0.6827) < 0.01  # within one sigma


@pytest.mark.parametrize("out", [None, TP.BOOL, TP.INT64])
def test_bernoulli_draws_each_elements_probability(out):
    p = np.tile(np.array([0.0, 0.1, 0.5, 0.9, 1.0], np.float32), (20000, 1))
    kw = {} if out is None else {"dtype": out}
    y = session(h.make_node("Bernoulli", ["x"], ["y"], **kw), [X], out or TP.FLOAT).run({"x": p})["y"]
    assert y.dtype == {None: np.float32, TP.BOOL: np.bool_, TP.INT64: np.int64}[out]
    np.testing.assert_allclose(y.astype(np.float64).mean(0), p[0], atol=0.01)
    assert y[:, 0].sum() == 0 and y[:, 4].all()


def test_a_seed_attribute_fixes_the_draws_and_runs_differ_without_one():
    seeded = session(h.make_node("RandomUniform", [], ["y"], shape=[4, 5], seed=7.0), [])
    np.testing.assert_array_equal(seeded.run({})["y"], seeded.run({})["y"])
    free = session(h.make_node("RandomUniform", [], ["y"], shape=[4, 5]), [])
    assert not np.array_equal(free.run({})["y"], free.run({})["y"])


def noisy_model():
    """loss = sum(x * RandomUniformLike(x) * w): dw = sum of x * u, the draw read again in backward."""
    nodes = [h.make_node("RandomUniformLike", ["x"], ["u"]), h.make_node("Mul", ["x", "u"], ["xu"]),
             h.make_node("Mul", ["xu", "w"], ["y"]), h.make_node("ReduceSum", ["y"], ["loss"], keepdims=0)]
    g = h.make_graph(nodes, "g", [X, h.make_tensor_value_info("w", TP.FLOAT, [8])],
                     [h.make_tensor_value_info("loss", TP.FLOAT, []), h.make_tensor_value_info("u", TP.FLOAT, None)])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 22)]).SerializeToString()


def test_gradients_read_the_forwards_draw_and_recompute_draws_it_again():
    x, w = np.random.rand(6, 8).astype(np.float32), np.ones(8, np.float32)
    plain = onnxtrain.Session.for_training(noisy_model(), ["w"], "loss")
    out, state = plain.run_forward({"x": x, "w": w}, seed=3)
    grads = plain.run_backward(state)
    np.testing.assert_allclose(grads["w"], (x * out["u"]).sum(0), rtol=1e-6)
    again, _ = plain.run_forward({"x": x, "w": w}, seed=3)
    np.testing.assert_array_equal(again["u"], out["u"])
    other, _ = plain.run_forward({"x": x, "w": w}, seed=4)
    assert not np.array_equal(other["u"], out["u"])
    options = onnxtrain.SessionOptions(memory_config="RandomUniformLike+Mul+:1:-1")
    recomputed = onnxtrain.Session.for_training(noisy_model(), ["w"], "loss", options)
    assert "RandomUniformLike+Mul+ | " in recomputed.memory_report() and " ON (1/1)" in recomputed.memory_report()
    _, state = recomputed.run_forward({"x": x, "w": w}, seed=3)
    np.testing.assert_array_equal(recomputed.run_backward(state)["w"], grads["w"])


class DropPath(torch.nn.Module):
    """A linear layer, then stochastic depth as transformers' and timm's drop_path write it, and rand/randn/bernoulli
    beside it."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(16, 16)

    def forward(self, x):
        h = self.proj(x)
        keep = 0.7
        mask = (keep + torch.rand(h.shape[0], 1, dtype=h.dtype)).floor()
        coin = torch.bernoulli(torch.full_like(h, 0.25))
        noise = torch.randn_like(h)
        return (h.div(keep) * mask).sum() + (coin * 0 + noise * 0).sum(), mask, coin, noise


def test_drop_path_trains_with_its_mask_as_gradient():
    torch.manual_seed(0)
    model = DropPath()
    ours = onnxtrain.Module(model)
    x = torch.randn(4000, 16)
    loss, mask, coin, noise = ours(x)
    loss.backward()
    assert set(mask.unique().tolist()) == {0.0, 1.0} and abs(mask.mean().item() - 0.7) < 0.03
    assert abs(coin.mean().item() - 0.25) < 0.01 and abs(noise.std().item() - 1) < 0.01
    torch.testing.assert_close(model.proj.bias.grad, torch.full((16,), mask.sum().item() / 0.7))
    torch.testing.assert_close(model.proj.weight.grad, ((mask / 0.7).T @ x).expand(16, 16), rtol=1e-4, atol=1e-4)
    assert ours.export_count == 1
    second, *_ = ours(x)
    assert not torch.equal(second, loss)  # a new draw each step (from torch's generator, as dropout)
