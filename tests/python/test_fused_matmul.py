"""com.onnxtrain.FusedMatMul (MatMul of operands read transposed, which batched MatMul gradients use) and the
batched products' tiles over non-zero bands, against NumPy: dense and causal (triangular) operands, every
transposition, broadcast batches, and an infinity opposite skipped zeros (NaN, as without skipping)."""

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxtrain


def run(a, b, ta, tb):
    t = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE}[a.dtype.type]
    node = helper.make_node("FusedMatMul", ["a", "b"], ["y"], domain="com.onnxtrain", transA=ta, transB=tb)
    graph = helper.make_graph([node], "fused_matmul", [helper.make_tensor_value_info("a", t, None),
                                                       helper.make_tensor_value_info("b", t, None)],
                              [helper.make_tensor_value_info("y", t, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20), helper.make_opsetid("com.onnxtrain", 1)])
    return onnxtrain.Session.from_bytes(model.SerializeToString()).run({"a": a, "b": b})["y"]


def swap(x):
    return np.swapaxes(x, -1, -2)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("ta,tb", [(0, 0), (0, 1), (1, 0), (1, 1)])
@pytest.mark.parametrize("causal", ["none", "a", "b", "both"])
def test_fused_matmul_matches_numpy(dtype, ta, tb, causal):
    rng = np.random.default_rng(ta * 2 + tb)
    a = rng.standard_normal((2, 3, 70, 70)).astype(dtype)  # op(A) (70, 70): tiles of 32 rows and a ragged one
    b = rng.standard_normal((3, 70, 45)).astype(dtype)  # broadcast over A's leading batch dim
    if causal in ("a", "both"):
        a = np.tril(a)
    if causal in ("b", "both"):
        b = np.triu(b)
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    got = run(np.ascontiguousarray(swap(a)) if ta else a, np.ascontiguousarray(swap(b)) if tb else b, ta, tb)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_an_infinity_opposite_skipped_zeros_still_makes_nan():
    a = np.tril(np.ones((4, 64, 64), np.float32))  # row i of A is zero past column i
    b = np.ones((4, 64, 8), np.float32)
    b[:, 63, 2] = np.inf  # row 63 of B meets zeros of every row of A but the last
    got = run(a, b, 0, 0)
    with np.errstate(invalid="ignore"):  # 0 * inf
        want = np.matmul(a, b)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(got[:, :63, 2]).all()


def test_a_bad_product_names_the_flags():
    with pytest.raises(onnxtrain.ShapeError, match=r"inner dims differ: \[2, 3, 4\] x \[2, 4, 5\] \(transA 0, transB 1\)"):
        run(np.ones((2, 3, 4), np.float32), np.ones((2, 4, 5), np.float32), 0, 1)
