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


def make_session(module, args, names, axes, tmp_path, opset=18):
    path = export_training(module, args, str(tmp_path / "model.onnx"), names, axes, output_names=["loss"],
                           opset=opset)
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
             lambda b, t: (torch.randint(0, 100, (b, t)),
                           (torch.arange(t)[None, :] < torch.randint(t // 2, t + 1, (b, 1))).float(),
                           torch.randint(0, 100, (b, t))),
             ["idx", "mask", "target"], {n: {0: "batch", 1: "seq"} for n in ("idx", "mask", "target")}),
}


@pytest.mark.parametrize("name", list(CASES))
def test_parameter_gradients_match_torch(name, tmp_path):
    torch.manual_seed(0)
    make, batch, names, axes = CASES[name]
    module = make().train()
    session = make_session(module, batch(2, 8), names, axes, tmp_path)
    for b, t in [(2, 8), (3, 12)]:
        check_grads(module, session, batch(b, t), names)


# Models as PyTorch's converters wrote them for older opsets (7 is the oldest the TorchScript-based exporter
# writes; GPT's scaled_dot_product_attention needs 14, its cross_entropy 12, hence a loss of log_softmax and a
# one-hot target). The graphs differ: Dropout's ratio an attribute (before 12), Split's, Squeeze's, Unsqueeze's and
# ReduceSum's sizes and axes attributes (before 13), Upsample (before 10), LogSoftmax over coerced 2D rows (before
# 13), BatchNormalization's training mode told by its outputs (before 14). (Not the U-Net before 11: ONNX's
# Upsample samples linearly from asymmetric coordinates, PyTorch's bilinear from half-pixel ones, and the exporter
# warns that they differ; test_upsample.py checks Upsample against onnxruntime.)
class OneHotLoss(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, *args):  # the model's inputs, then a one-hot target of its output's shape
        return -(self.model(*args[:-1]).log_softmax(-1) * args[-1]).sum() / args[-1].shape[0]


OLD = [("mlp", 7, 10), ("mlp", 9, 10), ("cnn", 7, 10), ("cnn", 9, 10), ("cnn", 11, 10), ("unet", 11, 5),
       ("bert", 11, 100), ("bert", 12, 100), ("gpt", 14, 65)]


@pytest.mark.parametrize("name,opset,classes", OLD)
def test_models_of_older_opsets_train_as_torch(name, opset, classes, tmp_path):
    torch.manual_seed(0)
    make, batch, names, axes = CASES[name]
    module = OneHotLoss(make().model).train()

    def one_hot_batch(b, t):
        *inputs, target = batch(b, t)
        return (*inputs, torch.nn.functional.one_hot(target, classes).float())

    session = make_session(module, one_hot_batch(2, 8), names, axes, tmp_path, opset)
    check_grads(module, session, one_hot_batch(3, 8), names)
