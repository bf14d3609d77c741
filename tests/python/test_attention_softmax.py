"""com.onnxtrain.AttentionSoftmax (the scores' product computed only where the mask leaves a tile's rows open,
then the masked softmax) against NumPy: causal, padding-style and per-batch masks, fills that vanish under exp
and one that does not, fully masked rows, tiles of 32 rows with a ragged last one."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxtrain


def run(a, b, scale, cond, fill):
    t = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE}[a.dtype.type]
    consts = [numpy_helper.from_array(np.array(scale, a.dtype), "scale"), numpy_helper.from_array(cond, "cond"),
              numpy_helper.from_array(np.array(fill, a.dtype), "fill")]
    node = helper.make_node("AttentionSoftmax", ["a", "b", "scale", "cond", "fill"], ["y"], domain="com.onnxtrain")
    graph = helper.make_graph([node], "attention_softmax", [helper.make_tensor_value_info("a", t, None),
                                                            helper.make_tensor_value_info("b", t, None)],
                              [helper.make_tensor_value_info("y", t, None)], initializer=consts)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20), helper.make_opsetid("com.onnxtrain", 1)])
    return onnxtrain.Session.from_bytes(model.SerializeToString()).run({"a": a, "b": b})["y"]


def reference(a, b, scale, cond, fill):
    z = np.where(cond, fill, np.matmul(a.astype(np.float64), b.astype(np.float64)) * scale)
    m = z.max(-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    e = np.exp(z - m)
    with np.errstate(invalid="ignore"):
        return e / e.sum(-1, keepdims=True)


S = 70
MASKS = {
    "causal": np.triu(np.ones((S, S), bool), 1),
    "padding": np.broadcast_to(np.arange(S) >= 50, (2, 1, 1, S)).copy(),  # keys past 50 masked, per batch
    "per_batch": np.stack([np.triu(np.ones((S, S), bool), 1), np.tril(np.ones((S, S), bool), -1)])[:, None],
    "rows_fully_masked": np.concatenate([np.ones((3, S), bool), np.triu(np.ones((S - 3, S), bool), 1)]),
}


# (a fully masked row of -inf is NaN in both: compared in the next test)
CASES = [(m, f) for m in MASKS for f in [-np.inf, np.finfo(np.float32).min, -3.0] if (m, f) != ("rows_fully_masked", -np.inf)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mask,fill", CASES)
def test_attention_softmax_matches_numpy(dtype, mask, fill):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((2, 3, S, 16)).astype(dtype)
    b = rng.standard_normal((2, 3, 16, S)).astype(dtype)
    np.testing.assert_allclose(run(a, b, 0.25, MASKS[mask], fill), reference(a, b, 0.25, MASKS[mask], fill),
                               rtol=2e-5, atol=1e-6)


def test_a_fully_masked_row_of_minus_infinity_is_nan_as_unfused():
    a = np.ones((1, 4, 8), np.float32)
    b = np.ones((1, 8, 4), np.float32)
    cond = np.array([[True] * 4, [False, True, True, True], [False, False, True, True], [False] * 4])
    got = run(a, b, 1.0, cond, -np.inf)
    assert np.isnan(got[0, 0]).all() and not np.isnan(got[0, 1:]).any()
