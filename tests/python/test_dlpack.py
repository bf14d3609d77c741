"""Tensors cross between PyTorch, numpy and onnxtrain by DLPack, without copies, in every dtype onnxtrain holds."""

import numpy as np
import pytest
import torch
from onnx import TensorProto, helper

import onnxtrain
from onnxtrain import _onnxtrain as C

DTYPES = {
    torch.float32: TensorProto.FLOAT,
    torch.float64: TensorProto.DOUBLE,
    torch.int64: TensorProto.INT64,
    torch.bfloat16: TensorProto.BFLOAT16,
    torch.float16: TensorProto.FLOAT16,
    torch.bool: TensorProto.BOOL,
}


def sample(dtype):
    return (torch.arange(12).reshape(3, 4) % 3).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_torch_round_trip_shares_memory(dtype):
    x = sample(dtype)
    t = C.from_dlpack(x)
    assert t.data_ptr == x.data_ptr()
    assert t.shape == (3, 4)
    y = torch.from_dlpack(t)
    assert y.data_ptr() == x.data_ptr() and y.dtype == dtype
    assert torch.equal(y, x)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_session_input_and_output_share_memory(dtype):
    # Identity is a view: its output is the caller's input, so equal pointers prove no copy either way.
    elem = DTYPES[dtype]
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", elem, ["n", 4])],
                              [helper.make_tensor_value_info("y", elem, ["n", 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    session = onnxtrain.Session.from_bytes(model.SerializeToString())
    x = sample(dtype)
    y = torch.from_dlpack(session.run({"x": x})["y"])
    assert y.data_ptr() == x.data_ptr()
    assert torch.equal(y, x)


def test_numpy_outputs_view_the_result():
    graph = helper.make_graph([helper.make_node("Add", ["x", "x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    session = onnxtrain.Session.from_bytes(helper.make_model(graph).SerializeToString())
    out = session.run({"x": np.array([1.0, 2.0], np.float32)})["y"]
    assert isinstance(out, np.ndarray) and out.dtype == np.float32
    np.testing.assert_array_equal(out, [2.0, 4.0])
    y = torch.from_dlpack(out)
    assert y.data_ptr() == out.ctypes.data


def test_read_only_and_non_array_inputs_are_taken():
    ro = np.arange(4, dtype=np.float32)
    ro.flags.writeable = False
    assert np.array_equal(C.from_dlpack(ro).numpy(), ro)
    assert C.from_dlpack([1, 2, 3]).dtype == "int64"


def test_non_contiguous_input_is_refused():
    x = torch.arange(12.0).reshape(3, 4).t()
    with pytest.raises(onnxtrain.InputError, match="not contiguous"):
        C.from_dlpack(x)


def test_bfloat16_output_is_an_onnxtrain_tensor():
    t = C.from_dlpack(sample(torch.bfloat16))
    assert "bfloat16" in repr(t)
    assert torch.from_dlpack(t).dtype == torch.bfloat16
