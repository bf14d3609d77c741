"""A vision transformer with shifted windows (transformers' SwinV2: convolution, padding to the window, normalized
cosine attention, adaptive pooling, in-place ReLU, stochastic depth) through both front doors against eager: the
loss and logits, every parameter gradient (relative to its scale) and 5 AdamW steps; with stochastic depth on, the
drop-path masks drawn as onnxtrain's random ops."""

import copy
import warnings

import numpy as np
import pytest
import torch

import onnxtrain
from parity import assert_trains_as_eager

T = pytest.importorskip("transformers")


def swinv2(drop_path=0.0):
    return T.Swinv2ForImageClassification(T.Swinv2Config(
        image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=4,
        drop_path_rate=drop_path, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, num_labels=5))


def wrap(model, door):
    return torch.compile(model, backend="onnxtrain") if door == "compile" else onnxtrain.Module(model)


@pytest.mark.parametrize("door", ["module", "compile"])
def test_swinv2_trains_as_eager(door):
    warnings.simplefilter("ignore")
    torch.manual_seed(0)
    eager = swinv2().train()
    ours = copy.deepcopy(eager)
    wrapped = wrap(ours, door)
    kw = dict(pixel_values=torch.randn(2, 3, 32, 32), labels=torch.tensor([1, 3]))
    assert_trains_as_eager(eager, ours, wrapped, kw, steps=5)
    if door == "module":
        assert wrapped.export_count == 1 and wrapped.runners()[0].exported.exporter == "torch.export"


def test_swinv2_with_stochastic_depth_trains():
    warnings.simplefilter("ignore")
    torch.manual_seed(0)
    # (the image's sizes fixed: test_swinv2_trains_as_eager captures them as symbols, which takes torch.export
    # some 50 s more)
    model = onnxtrain.Module(swinv2(drop_path=0.5).train(), onnxtrain.Options(dynamic="batch"))
    kw = dict(pixel_values=torch.randn(8, 3, 32, 32), labels=torch.arange(8) % 5)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(8):
        opt.zero_grad()
        loss = model(**kw).loss
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert model.export_count == 1 and all(np.isfinite(losses)) and min(losses[-3:]) < losses[0], losses
    graph = model.runners()[0].exported.model.graph
    assert sum(n.op_type == "RandomUniformLike" for n in graph.node) == 2  # one drop path per block


def test_resnet_trains_as_eager_captured_directly():
    """transformers' ResNet (convolutions, BatchNorm in training, max pooling): loss, logits, every gradient and 3
    AdamW steps as eager's, captured by the direct translation, the running statistics and the batch count as
    eager's after them."""
    warnings.simplefilter("ignore")
    torch.manual_seed(0)
    eager = T.ResNetForImageClassification(T.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1],
                                                          image_size=32, num_labels=5)).train()
    ours = copy.deepcopy(eager)
    wrapped = onnxtrain.Module(ours)
    kw = dict(pixel_values=torch.randn(2, 3, 32, 32), labels=torch.tensor([1, 3]))
    assert_trains_as_eager(eager, ours, wrapped, kw, steps=3)
    assert wrapped.runners()[0].exported.model.producer_name == "onnxtrain"
    for (name, got), (_, want) in zip(ours.named_buffers(), eager.named_buffers()):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6, msg=name)
