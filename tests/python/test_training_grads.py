"""Gradients of every parameter, from one training graph at two batch/sequence sizes, match torch.autograd."""

import numpy as np
import onnx
import pytest
import torch

import onnxtrain
from export_util import export_training
from models import BERT, CNN, GPT, MLP, UNet, WithLoss


def rel_error(got, want):
    # Relative to the largest gradient entry; gradients that are zero in exact arithmetic (a conv bias
    # before a training-mode BatchNorm) are float32 noise in both, hence the floor.
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-3))


def make_session(module, args, names, axes, tmp_path):
    path = export_training(module, args, str(tmp_path / "model.onnx"), names, axes, output_names=["loss"])
    model = onnx.load(path)
    params = dict(module.named_parameters())
    wrt = [i.name for i in model.graph.initializer if i.name in params]
    assert sorted(wrt) == sorted(params), "every parameter is an initializer of the exported graph"
    return onnxtrain.Session.for_training(model.SerializeToString(), wrt, "loss")


def check_grads(module, session, args, names):
    module.zero_grad()
    loss = module(*args)
    loss.backward()
    feeds = {n: a.numpy() for n, a in zip(names, args)}
    out, state = session.run_forward(feeds)
    assert rel_error(out["loss"], loss.detach().numpy()) < 1e-5
    grads = session.run_backward(state)
    for name, p in module.named_parameters():
        assert rel_error(grads[name], p.grad.numpy()) < 1e-4, name


def gpt_batch(b, t):
    return torch.randint(0, 65, (b, t)), torch.randint(0, 65, (b, t))


CASES = {
    "mlp": (lambda: WithLoss(MLP()), lambda b, t: (torch.randn(b, 16), torch.randint(0, 10, (b,))),
            ["x", "target"], {"x": {0: "batch"}, "target": {0: "batch"}}),
    "cnn": (lambda: WithLoss(CNN()), lambda b, t: (torch.randn(b, 3, t, t), torch.randint(0, 10, (b,))),
            ["x", "target"], {"x": {0: "batch", 2: "h", 3: "w"}, "target": {0: "batch"}}),
    "unet": (lambda: WithLoss(UNet()), lambda b, t: (torch.randn(b, 3, t, t), torch.randint(0, 5, (b, t, t))),
             ["x", "target"], {"x": {0: "batch", 2: "h", 3: "w"}, "target": {0: "batch", 1: "h", 2: "w"}}),
    "gpt": (lambda: WithLoss(GPT(vocab=65, dim=32, heads=4, layers=2, block=64)), gpt_batch,
            ["idx", "target"], {"idx": {0: "batch", 1: "seq"}, "target": {0: "batch", 1: "seq"}}),
    "bert": (lambda: WithLoss(BERT(vocab=100, dim=32, heads=4, layers=2, block=64)),
             lambda b, t: (torch.randint(0, 100, (b, t)), (torch.arange(t)[None, :] < torch.randint(t // 2, t + 1, (b, 1))).float(),
                           torch.randint(0, 100, (b, t))),
             ["idx", "mask", "target"], {"idx": {0: "batch", 1: "seq"}, "mask": {0: "batch", 1: "seq"}, "target": {0: "batch", 1: "seq"}}),
}


@pytest.mark.parametrize("name", list(CASES))
def test_parameter_gradients_match_torch(name, tmp_path):
    torch.manual_seed(0)
    make, batch, names, axes = CASES[name]
    module = make().train()
    session = make_session(module, batch(2, 8), names, axes, tmp_path)
    for b, t in [(2, 8), (3, 12)]:
        check_grads(module, session, batch(b, t), names)
