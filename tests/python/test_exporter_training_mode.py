"""What PyTorch 2.13's two ONNX exporters emit for a module in training mode (BatchNorm, Dropout, loss): the
torch.export-based one with its default translations loses training BatchNorm, which is why onnxtrain.Module's
torch.export capture brings its own (translations; tests in test_capture.py)."""

import onnx
import torch
from torch import nn

from export_util import export, export_training


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.drop = nn.Dropout(0.25)
        self.fc = nn.Linear(4, 5)

    def forward(self, x, y):
        logits = self.fc(self.drop(self.bn(self.conv(x)).mean((2, 3))))
        return nn.functional.cross_entropy(logits, y)


def ops_of(path):
    return onnx.load(path).graph.node


def test_default_exporter_loses_training_batchnorm(tmp_path):
    torch.manual_seed(0)
    m = Net().train()
    args = (torch.randn(2, 3, 6, 6), torch.randint(0, 5, (2,)))
    nodes = ops_of(export(m, args, str(tmp_path / "a.onnx"), ["x", "y"], {"x": {0: "batch"}, "y": {0: "batch"}}))
    bn = [n for n in nodes if n.op_type == "BatchNormalization"]
    training = [a.i for n in bn for a in n.attribute if a.name == "training_mode"]
    assert not any(training), "the torch.export-based exporter emits BatchNorm with inference semantics"
    assert any(n.op_type == "SoftmaxCrossEntropyLoss" for n in nodes)


def test_torchscript_exporter_keeps_training_semantics(tmp_path):
    torch.manual_seed(0)
    m = Net().train()
    args = (torch.randn(2, 3, 6, 6), torch.randint(0, 5, (2,)))
    axes = {"x": {0: "batch"}, "y": {0: "batch"}}
    nodes = ops_of(export_training(m, args, str(tmp_path / "b.onnx"), ["x", "y"], axes))
    bn = [n for n in nodes if n.op_type == "BatchNormalization"]
    assert bn and all(a.i == 1 for n in bn for a in n.attribute if a.name == "training_mode")
    assert all(len(n.output) == 3 for n in bn), "training BatchNorm outputs the updated running statistics"
    assert any(n.op_type == "Dropout" for n in nodes)
    assert any(n.op_type == "SoftmaxCrossEntropyLoss" for n in nodes)
