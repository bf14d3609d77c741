"""Models exported by PyTorch's exporter run in one Session at several sizes and match PyTorch eager."""

import numpy as np
import pytest
import torch

import onnxtrain
from export_util import export
from models import CNN, GPT


def rel_error(got, want):
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))


@pytest.fixture(scope="module")
def gpt_session(tmp_path_factory):
    torch.manual_seed(0)
    model = GPT(vocab=65, dim=64, heads=4, layers=2, block=64).eval()
    idx = torch.randint(0, 65, (2, 16))
    path = export(model, (idx,), str(tmp_path_factory.mktemp("gpt") / "gpt.onnx"), ["idx"], {"idx": {0: "batch", 1: "seq"}})
    return model, onnxtrain.Session(path)


@pytest.fixture(scope="module")
def cnn_session(tmp_path_factory):
    torch.manual_seed(0)
    model = CNN().eval()
    with torch.no_grad():  # non-trivial running statistics
        for bn in (model.bn1, model.bn2):
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
    x = torch.randn(2, 3, 16, 16)
    path = export(model, (x,), str(tmp_path_factory.mktemp("cnn") / "cnn.onnx"), ["x"], {"x": {0: "batch", 2: "height", 3: "width"}})
    return model, onnxtrain.Session(path)


def test_gpt_input_shape_is_symbolic(gpt_session):
    _, session = gpt_session
    assert session.input_types() == {"idx": "int64[batch, seq]"}


@pytest.mark.parametrize("batch,seq", [(2, 16), (3, 41)])
def test_gpt_matches_eager(gpt_session, batch, seq):
    model, session = gpt_session
    idx = torch.randint(0, 65, (batch, seq))
    got = session.run({"idx": idx.numpy()})[session.output_names[0]]
    with torch.no_grad():
        want = model(idx).numpy()
    assert got.shape == want.shape
    assert rel_error(got, want) < 1e-5


@pytest.mark.parametrize("batch,size", [(2, 16), (5, 24)])
def test_cnn_matches_eager(cnn_session, batch, size):
    model, session = cnn_session
    x = torch.randn(batch, 3, size, size)
    got = session.run({"x": x.numpy()})[session.output_names[0]]
    with torch.no_grad():
        want = model(x).numpy()
    assert got.shape == want.shape
    assert rel_error(got, want) < 1e-5
