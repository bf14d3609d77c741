"""Upsample (opsets 7-9, what PyTorch's converters wrote for F.interpolate before Resize) against onnxruntime:
nearest and linear, integer and fractional scales, scales as an input (9) or an attribute (7). Its gradient:
test_gradcheck.py."""

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxtrain


def upsample_model(opset, mode, scales):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * 4)
    if opset >= 9:
        node = helper.make_node("Upsample", ["x", "scales"], ["y"], mode=mode)
        inits = [numpy_helper.from_array(np.array(scales, np.float32), "scales")]
    else:
        node = helper.make_node("Upsample", ["x"], ["y"], mode=mode, scales=scales)
        inits = []
    graph = helper.make_graph([node], "upsample", [x], [y], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8).SerializeToString()


@pytest.mark.parametrize("opset", [7, 9])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("scales", [[1.0, 1.0, 2.0, 3.0], [1.0, 1.0, 1.5, 2.5]])
def test_upsample_matches_onnxruntime(opset, mode, scales):
    model = upsample_model(opset, mode, scales)
    x = np.random.default_rng(0).standard_normal((1, 2, 3, 4)).astype(np.float32)
    want = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = onnxtrain.Session.from_bytes(model).run({"x": x})["y"]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
