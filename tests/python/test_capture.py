"""onnxtrain.Module's two capture paths, torch.export (the default) and PyTorch's TorchScript-based exporter (the
fallback): training-mode BatchNorm (batch statistics, running statistics moved as PyTorch moves them), dropout
and buffers keep their semantics on both; sizes torch.export specializes get their own graph; "auto" falls back,
saying why, where torch.export cannot capture a module."""

import copy
import logging

import pytest
import torch
from torch import nn

import onnxtrain

EXPORTERS = ["torch.export", "torchscript"]


@pytest.fixture(autouse=True)
def _exporter_from_options(monkeypatch):
    monkeypatch.delenv("ONNXTRAIN_EXPORTER", raising=False)  # (the environment would override the options)


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4, 5)
        self.register_buffer("scale", torch.tensor([0.5, 2.0, 1.0, 3.0]))  # a buffer read, never trained

    def forward(self, x):
        h = torch.relu(self.bn(self.conv(x))).mean((2, 3)) * self.scale
        return self.fc(h)


def wrapped(module, exporter, **options):
    return onnxtrain.Module(module, onnxtrain.Options(exporter=exporter, **options))


@pytest.mark.parametrize("exporter", EXPORTERS)
def test_training_batchnorm_and_buffers_match_eager(exporter):
    ref = ConvNet().train()
    model = copy.deepcopy(ref)
    ours = wrapped(model, exporter)
    for step in range(3):
        x = torch.randn(4, 3, 6, 6)
        y, expected = ours(x), ref(x)
        torch.testing.assert_close(y, expected, rtol=1e-5, atol=1e-5)
        y.square().sum().backward()
        expected.square().sum().backward()
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=f"{name} at step {step}")
        for (name, b), c in zip(model.named_buffers(), ref.buffers()):
            torch.testing.assert_close(b, c, rtol=1e-5, atol=1e-6, msg=f"{name} at step {step}")
    assert ours.runners()[0].exported.exporter == exporter
    model.eval(), ref.eval()
    x = torch.randn(2, 3, 6, 6)
    torch.testing.assert_close(ours(x), ref(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("exporter", ["torch.export", "torch.onnx"])
def test_an_untracked_batchnorm_trains_as_eager(exporter):
    """BatchNorm without running statistics: the batch's, which PyTorch's exporter computes before the norm and
    onnxtrain differentiates through (the gradient of BatchNormalization's mean and variance inputs)."""
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Conv2d(3, 4, 3, bias=False), nn.BatchNorm2d(4, track_running_stats=False)).train()
    model = copy.deepcopy(ref)
    ours = wrapped(model, exporter)
    x, weights = torch.randn(4, 3, 6, 6), torch.randn(4, 4, 4, 4)
    y, expected = ours(x), ref(x)
    torch.testing.assert_close(y, expected, rtol=1e-5, atol=1e-5)
    (y * weights).sum().backward()
    (expected * weights).sum().backward()
    torch.testing.assert_close(model[0].weight.grad, ref[0].weight.grad, rtol=1e-4, atol=1e-5)
    assert (ours.runners()[0].exported.model.producer_name == "onnxtrain") == (exporter == "torch.export")


@pytest.mark.parametrize("exporter", EXPORTERS)
def test_dropout_drops_in_training_only_and_its_gradient_follows_the_mask(exporter):
    drop = nn.Sequential(nn.Dropout(0.25))
    ours = wrapped(drop, exporter)
    x = torch.rand(64, 64).add(1).requires_grad_()
    y = ours(x)
    kept = y != 0
    assert 0.2 < 1 - kept.float().mean().item() < 0.3
    torch.testing.assert_close(y[kept], x[kept] / 0.75)
    y.sum().backward()
    torch.testing.assert_close(x.grad, kept.float() / 0.75)
    drop.eval()
    torch.testing.assert_close(ours(x), x)


def test_a_specialized_size_gets_its_own_graph():
    """torch.export makes a dim of size 1 a size, not a symbol: a batch of 1 has a graph of its own."""
    model = nn.Linear(8, 3)
    ours = wrapped(model, "torch.export")
    for batch in (1, 4, 1, 7):
        x = torch.randn(batch, 8)
        torch.testing.assert_close(ours(x), model(x))
    assert [r.fixed_sizes for r in ours.runners()] == [[(0, 0, 1)], []]


class DataDependent(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        if x.sum() > 0:  # a branch on a value: torch.export cannot capture it, the tracer takes one side
            return self.fc(x)
        return -self.fc(x)


def test_auto_falls_back_to_torchscript_and_says_why(caplog):
    x = torch.ones(2, 4)
    model = DataDependent()
    with caplog.at_level(logging.WARNING, logger="onnxtrain"):
        ours = wrapped(model, "auto")
        torch.testing.assert_close(ours(x), model(x))
    assert ours.runners()[0].exported.exporter == "torchscript"
    assert any("torch.export cannot capture it" in r.getMessage() for r in caplog.records), caplog.text
    with pytest.raises(Exception, match="(?i)data.dependent|guard"):
        wrapped(DataDependent(), "torch.export")(x)


def test_an_unknown_exporter_is_refused():
    with pytest.raises(ValueError, match="ONNXTRAIN_EXPORTER"):
        wrapped(ConvNet(), "jit")


class CrossEntropy(nn.Module):
    def __init__(self, **kw):
        super().__init__()
        self.kw = kw

    def forward(self, h, t):
        return nn.functional.cross_entropy(h, t, **self.kw)


CROSS_ENTROPY = {
    "smoothing": ("class", dict(label_smoothing=0.1, ignore_index=2)),
    "weighted_smoothing_sum": ("class", dict(label_smoothing=0.2, weight=torch.rand(6) + 0.5, reduction="sum")),
    "weighted_smoothing_mean": ("class", dict(label_smoothing=0.2, weight=torch.rand(6) + 0.5, ignore_index=2)),
    "probabilities_smoothing": ("probability", dict(label_smoothing=0.1, weight=torch.rand(6) + 0.5)),
    "probabilities_none": ("probability", dict(reduction="none")),
}


@pytest.mark.parametrize("case", CROSS_ENTROPY)
def test_cross_entropy_keeps_label_smoothing_and_weights(case):
    """torch.export-based exporter's translation drops label_smoothing: onnxtrain's own keeps it."""
    kind, kw = CROSS_ENTROPY[case]
    h = torch.randn(5, 6, 3)
    t = torch.randint(0, 6, (5, 3)) if kind == "class" else torch.softmax(torch.randn(5, 6, 3), 1)
    if kind == "class":
        t[0, 0] = 2
    loss = CrossEntropy(**kw)
    ours, theirs = h.clone().requires_grad_(), h.clone().requires_grad_()
    y, expected = wrapped(loss, "torch.export")(ours, t), loss(theirs, t)
    torch.testing.assert_close(y, expected, rtol=1e-5, atol=1e-6)
    y.sum().backward()
    expected.sum().backward()
    torch.testing.assert_close(ours.grad, theirs.grad, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("exporter", EXPORTERS)
def test_capture_leaves_every_submodule_in_its_mode(exporter):
    """A frozen BatchNorm in eval inside a training model stays so (the TorchScript-based exporter sets one mode on
    every submodule while it traces), and a module in eval stays in eval."""
    model = ConvNet().train()
    model.bn.eval()
    ours = wrapped(model, exporter)
    ours(torch.randn(2, 3, 6, 6))
    assert model.training and model.conv.training and not model.bn.training
    model.eval()
    ours(torch.randn(2, 3, 6, 6))
    assert not any(m.training for m in model.modules())
