"""com.onnxtrain.GeluAndGrad, which the memory optimizer makes of a recomputed Gelu and the GeluGrad reading the
same input, gives exactly what the two give apart (recompute must not change a bit of the gradients), in both
forms: exact, and tanh (GPT-2's)."""

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxtrain


def model(dtype, approximate):
    t = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE}[dtype]
    io = lambda name: helper.make_tensor_value_info(name, t, ["n"])  # noqa: E731
    form = {"approximate": approximate}
    nodes = [helper.make_node("Gelu", ["x"], ["y_apart"], **form),
             helper.make_node("GeluGrad", ["dy", "x"], ["dx_apart"], domain="com.onnxtrain", **form),
             helper.make_node("GeluAndGrad", ["dy", "x"], ["dx", "y"], domain="com.onnxtrain", **form)]
    outputs = [io(n) for n in ["y_apart", "dx_apart", "y", "dx"]]
    graph = helper.make_graph(nodes, "gelu_and_grad", [io("x"), io("dy")], outputs)
    opsets = [helper.make_opsetid("", 20), helper.make_opsetid("com.onnxtrain", 1)]
    return helper.make_model(graph, opset_imports=opsets)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [1, 13, 4099, 100003])  # tails of every length; one and several threads' chunks
def test_gelu_and_grad_equals_gelu_and_gelu_grad_bit_for_bit(dtype, n, approximate):
    rng = np.random.default_rng(n)
    x = (rng.standard_normal(n) * 3).astype(dtype)  # both sides of |x / sqrt 2| = 1, where erf changes formula
    x[: min(n, 6)] = np.array([0.0, -0.0, 1.4142135, -9.5, np.inf, -np.inf], dtype)[: min(n, 6)]
    dy = rng.standard_normal(n).astype(dtype)
    out = onnxtrain.Session.from_bytes(model(dtype, approximate).SerializeToString()).run({"x": x, "dy": dy})
    bits = np.uint32 if dtype == np.float32 else np.uint64
    for fused, apart in [("y", "y_apart"), ("dx", "dx_apart")]:
        np.testing.assert_array_equal(out[fused].view(bits), out[apart].view(bits), err_msg=fused)
