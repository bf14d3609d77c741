"""Every op with a gradient rule, checked against float64 central finite differences over several
shapes, broadcasting cases and attribute values; every other op of the table is listed with why."""

import numpy as np
import pytest

import onnxtrain
from gradcheck import Case, Const, check

rng = np.random.default_rng(0)


def r(*shape, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, shape)


def away(*shape, frm=0.0, gap=0.2):
    """Values at least `gap` away from `frm` (for kinks)."""
    x = rng.uniform(gap, 1.0, shape) * rng.choice([-1.0, 1.0], shape)
    return x + frm


def distinct(*shape):
    """A permutation of well-separated values (for max/min/sort ties)."""
    n = int(np.prod(shape))
    return (rng.permutation(n) * 0.37 - n * 0.18).reshape(shape)


def ints(values):
    return Const(np.array(values, dtype=np.int64))


UNARY = {
    "Abs": away(3, 4), "Neg": r(3, 4), "Exp": r(3, 4), "Log": r(3, 4, lo=0.5, hi=2), "Sqrt": r(3, 4, lo=0.5, hi=2),
    "Reciprocal": away(3, 4, gap=0.5), "Tanh": r(3, 4), "Sigmoid": r(3, 4), "Relu": away(3, 4), "Softsign": r(3, 4),
    "Softplus": r(3, 4), "Erf": r(3, 4), "Sin": r(3, 4), "Cos": r(3, 4), "Tan": r(3, 4),
    "Asin": r(3, 4, lo=-0.8, hi=0.8),
    "Acos": r(3, 4, lo=-0.8, hi=0.8), "Atan": r(3, 4), "Sinh": r(3, 4), "Cosh": r(3, 4), "Asinh": r(3, 4),
    "Acosh": r(3, 4, lo=1.2, hi=3), "Atanh": r(3, 4, lo=-0.8, hi=0.8), "HardSwish": r(3, 4, lo=-2.5, hi=2.5) * 2,
    "Mish": r(3, 4), "Identity": r(2, 3), "Elu": away(3, 4), "Celu": away(3, 4), "Selu": away(3, 4),
    "Gelu": r(3, 4) * 2,
    "LeakyRelu": away(3, 4), "ThresholdedRelu": away(3, 4, frm=1.0), "HardSigmoid": r(3, 4) * 4,
}

CASES = [Case(op, [x]) for op, x in UNARY.items()]
CASES += [
    Case("LeakyRelu", [away(2, 5)], {"alpha": 0.3}),
    Case("Elu", [away(2, 5)], {"alpha": 0.7}),
    Case("Celu", [away(2, 5)], {"alpha": 2.0}),
    Case("Selu", [away(2, 5)], {"alpha": 1.5, "gamma": 2.0}),
    Case("HardSigmoid", [r(2, 5) * 4], {"alpha": 0.3, "beta": 0.4}),
    Case("ThresholdedRelu", [away(2, 5, frm=0.5)], {"alpha": 0.5}),
    Case("Gelu", [r(2, 5) * 2], {"approximate": "tanh"}),
    Case("Cast", [r(2, 3)], {"to": 11}),
    Case("CastLike", [r(2, 3), Const(np.zeros(1))]),
]
for shapes in [((2, 3), (2, 3)), ((2, 3), (3,)), ((2, 1, 4), (3, 1)), ((1,), (2, 2))]:
    a, b = r(*shapes[0]), r(*shapes[1])
    CASES += [Case("Add", [a, b]), Case("Sub", [a, b]), Case("Mul", [a, b]),
              Case("Div", [a, away(*shapes[1], gap=0.5)]), Case("Pow", [r(*shapes[0], lo=0.5, hi=2), b]),
              Case("PRelu", [away(*shapes[0]), b])]
for op in ["Sum", "Mean", "Max", "Min"]:
    CASES += [Case(op, [distinct(2, 3), distinct(3) + 0.1, distinct(2, 1) + 0.05]), Case(op, [r(4)])]
CASES += [
    Case("Where", [Const(rng.random((2, 3)) > 0.5), r(2, 3), r(3)]),
    Case("Clip", [away(2, 4, frm=0.3, gap=0.1), Const(np.array(-0.2)), Const(np.array(0.3))]),
    Case("Clip", [away(2, 4, frm=0.3, gap=0.1), None, Const(np.array(0.3))]),
    Case("Pow", [r(2, 3, lo=0.5, hi=2), Const(np.array(3, dtype=np.int64))]),
]
for a, b in [((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((2, 3, 4), (2, 4, 5)), ((4,), (4, 5)), ((3, 4), (4,)),
             ((2, 1, 3, 4), (3, 4, 2)), ((2, 3, 4), (1, 4, 2))]:
    CASES.append(Case("MatMul", [r(*a), r(*b)]))
for ta in (0, 1):
    for tb in (0, 1):
        a = r(4, 3) if ta else r(3, 4)
        b = r(5, 4) if tb else r(4, 5)
        CASES.append(Case("Gemm", [a, b, r(5)], {"transA": ta, "transB": tb, "alpha": 0.7, "beta": 1.3}))
CASES += [Case("Gemm", [r(3, 4), r(4, 5), r(3, 5)]), Case("Gemm", [r(3, 4), r(4, 5)])]
SCALES = Const(np.array([1, 1, 2, 1.5]))
CASES += [Case("Resize", [r(1, 2, 3, 4), None, SCALES], {"mode": m, "coordinate_transformation_mode": c})
          for m, c in [("nearest", "asymmetric"), ("nearest", "half_pixel"), ("linear", "half_pixel"),
                       ("linear", "align_corners"), ("linear", "pytorch_half_pixel"), ("cubic", "half_pixel")]]
CASES += [Case("Resize", [r(1, 1, 6, 5), None, None, Const(np.array([1, 1, 4, 3], dtype=np.int64))],
               {"mode": "linear"}),  # down-sampling to sizes: overlapping taps
          Case("Resize", [r(1, 1, 4, 4), None, Const(np.array([1.5, 0.5]))],
               {"mode": "cubic", "axes": [3, 2], "exclude_outside": 1}),
          Case("Resize", [r(1, 1, 5, 5), Const(np.array([0.2, 0.1, 0.9, 0.8])), Const(np.array([1.6, 1.2]))],
               {"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize", "axes": [2, 3],
                "extrapolation_value": 3.0})]
MOD_A = np.array([[0.35, 1.7, -2.45], [3.5, -0.6, 5.9]])  # a / b at least 0.1 from an integer: no jump nearby
CASES += [Case("Mod", [MOD_A, np.array([0.8, -1.3, 2.1])], {"fmod": f}) for f in (0, 1)]
for ta in (0, 1):  # MatMul(op(A), op(B)), what batched MatMul gradients are made of
    for tb in (0, 1):
        a, b = (2, 1, 4, 3) if ta else (2, 1, 3, 4), (3, 5, 4) if tb else (3, 4, 5)
        CASES.append(Case("FusedMatMul", [r(*a), r(*b)], {"transA": ta, "transB": tb}, domain="com.onnxtrain"))
CASES += [Case("Linear", [x, r(5, 4), *bias], domain="com.onnxtrain")  # X W^T + B, what linear_fusion makes
          for x in (r(3, 4), r(2, 3, 4), r(4)) for bias in ([r(5)], [])]
CAUSAL = np.triu(np.ones((4, 4), dtype=bool), 1)  # what masked_softmax_fusion makes of attention's scale, mask, softmax
CASES += [Case("MaskedSoftmax", [r(2, 3, 4, 4), Const(np.array(0.125)), Const(CAUSAL), Const(np.array(-np.inf))],
               domain="com.onnxtrain"),
          Case("MaskedSoftmax", [r(3, 5), Const(np.array(2.0)), Const(np.array([[False, True, False, False, True]])),
                                 Const(np.array(-1e4))], domain="com.onnxtrain")]
CASES += [Case("AttentionSoftmax", [r(2, 3, 4, 5), r(2, 3, 5, 4), Const(np.array(0.125)), Const(CAUSAL),
                                    Const(np.array(-np.inf))],
               domain="com.onnxtrain"),  # what attention_softmax_fusion makes
          Case("AttentionSoftmax", [r(2, 3, 5), r(5, 4), Const(np.array(0.5)),
                                    Const(np.array([[False, True, False, True]])), Const(np.array(-1e4))],
               domain="com.onnxtrain")]
# What flash_attention_fusion makes: causal, no mask, K and V shared by heads (grouped-query) under a finite fill
# with a fully masked row, two key tiles with skipped keys, dropout.
LONG_MASK = np.triu(np.ones((40, 260), dtype=bool), 221)
CASES += [Case("FlashAttention", [r(2, 3, 5, 4), r(2, 3, 6, 4), r(2, 3, 6, 3), Const(np.array(0.5)),
                                  Const(np.triu(np.ones((5, 6), dtype=bool), 1)), Const(np.array(-np.inf))],
               domain="com.onnxtrain"),
          Case("FlashAttention", [r(2, 5, 4), r(2, 7, 4), r(2, 7, 3), Const(np.array(0.3))], domain="com.onnxtrain"),
          Case("FlashAttention", [r(2, 4, 5, 4), r(2, 1, 5, 4), r(2, 1, 5, 3), Const(np.array(0.7)),
                                  Const(np.array([[True] * 5] + [[False, True, False, True, False]] * 4)),
                                  Const(np.array(-1e4))], domain="com.onnxtrain"),
          Case("FlashAttention", [r(1, 40, 2), r(1, 260, 2), r(1, 260, 2), Const(np.array(0.9)), Const(LONG_MASK),
                                  Const(np.array(-np.inf))], domain="com.onnxtrain"),
          Case("FlashAttention", [r(2, 6, 4), r(2, 6, 4), r(2, 6, 3), Const(np.array(0.5)),
                                  Const(np.triu(np.ones((6, 6), dtype=bool), 1)), Const(np.array(-np.inf)),
                                  Const(np.array(0.4)), Const(np.array(True))], domain="com.onnxtrain"),
          # an additive mask (-inf above the diagonal, a padding key) and no scale, as SDPA exports attention
          Case("FlashAttention", [r(2, 3, 5, 4), r(2, 3, 5, 4), r(2, 3, 5, 3), None, None, None, None, None,
                                  Const(np.where(np.triu(np.ones((5, 5), dtype=bool), 1), -np.inf, 0.0)
                                        + np.array([0, 0, 0, 0, -2.0]))], domain="com.onnxtrain"),
          # 4 query heads reading 2 key-value heads (kv_groups: what grouped_attention_fusion makes of repeat_kv)
          Case("FlashAttention", [r(2, 4, 5, 3), r(2, 2, 6, 3), r(2, 2, 6, 2), Const(np.array(0.5)),
                                  Const(np.triu(np.ones((5, 6), dtype=bool), 2)), Const(np.array(-np.inf))],
               {"kv_groups": 2}, domain="com.onnxtrain"),
          # the same sequence-major (B, T, H, d), as projections write them (attention_layout takes the Transposes
          # in); and Q and Y as (B, H, T, d) beside sequence-major K and V
          Case("FlashAttention", [r(2, 5, 4, 3), r(2, 6, 2, 3), r(2, 6, 2, 2), Const(np.array(0.5)),
                                  Const(np.triu(np.ones((5, 6), dtype=bool), 2)), Const(np.array(-np.inf))],
               {"kv_groups": 2, "sequence_major": [1, 1, 1, 1]}, domain="com.onnxtrain"),
          Case("FlashAttention", [r(2, 3, 5, 4), r(2, 6, 3, 4), r(2, 6, 3, 2), Const(np.array(0.5)), None, None,
                                  Const(np.array(0.3)), Const(np.array(True))],
               {"sequence_major": [0, 1, 1, 0]}, domain="com.onnxtrain"),
          # Q, K and V side by side in one projection's output (B, T, (H + 2 Hkv) d): 4 query heads, 2 key-value
          # heads of 3, with dropout; its gradient dX
          Case("FlashAttention", [r(2, 6, 24), None, None, Const(np.array(0.5)),
                                  Const(np.triu(np.ones((6, 6), dtype=bool), 1)), Const(np.array(-np.inf)),
                                  Const(np.array(0.3)), Const(np.array(True))],
               {"packed_heads": 4, "kv_groups": 2, "sequence_major": [1, 1, 1, 1]}, domain="com.onnxtrain"),
          # a bool mask made additive, two rows fully masked: zeros there, as scaled_dot_product_attention gives
          Case("FlashAttention", [r(2, 5, 4), r(2, 5, 4), r(2, 5, 3), None, None, None, None, None,
                                  Const(np.where(np.array([[True] * 5, [False] * 5, [True, False] * 2 + [True],
                                                           [False] * 5, [True] * 5]), 0.0, -np.inf))],
               {"zero_masked_rows": 1}, domain="com.onnxtrain")]
for op in ["Softmax", "LogSoftmax"]:
    CASES += [Case(op, [r(3, 5)]), Case(op, [r(2, 3, 4)], {"axis": 1}), Case(op, [r(2, 3, 4)], {"axis": 0})]
REDUCE = {"ReduceSum": r, "ReduceMean": r, "ReduceMax": distinct, "ReduceMin": distinct, "ReduceProd": away,
          "ReduceL1": away, "ReduceL2": r, "ReduceSumSquare": r, "ReduceLogSum": lambda *s: r(*s, lo=0.5, hi=2),
          "ReduceLogSumExp": r}
for op, gen in REDUCE.items():
    CASES += [Case(op, [gen(2, 3, 4), ints([1])]), Case(op, [gen(2, 3, 4), ints([0, 2])], {"keepdims": 0}),
              Case(op, [gen(3, 4)], {"keepdims": 0})]
CASES += [
    Case("Reshape", [r(2, 6), ints([3, -1])]), Case("Flatten", [r(2, 3, 4)], {"axis": 2}),
    Case("Squeeze", [r(2, 1, 3), ints([1])]), Case("Unsqueeze", [r(2, 3), ints([0, 3])]),
    Case("Transpose", [r(2, 3, 4)], {"perm": [2, 0, 1]}), Case("Transpose", [r(2, 3)]),
    Case("Concat", [r(2, 3), r(2, 1), r(2, 2)], {"axis": 1}), Case("Concat", [r(1, 3), r(2, 3)], {"axis": -2}),
    Case("Split", [r(2, 6), ints([2, 4])], {"axis": 1}, outputs=2),
    Case("Split", [r(6, 2)], {"num_outputs": 3}, outputs=3),
    Case("Slice", [r(4, 5), ints([1, 0]), ints([3, 5]), ints([0, 1]), ints([1, 2])]),
    Case("Slice", [r(4, 5), ints([-1]), ints([-5]), ints([1]), ints([-2])]),
    Case("Slice", [r(2, 3, 6), ints([3]), ints([2**62]), ints([-1])]),  # rotate_half's second half
    Case("Slice", [r(2, 3, 6), ints([-9, 1]), ints([2, 100])]),  # clamped, every axis from 0
    Case("Expand", [r(3, 1), ints([2, 3, 4])]), Case("Tile", [r(2, 3), ints([2, 1])]),
    Case("Pad", [r(2, 3), ints([0, 1, 1, 2]), Const(np.array(0.5))]),
    Case("Pad", [r(2, 3, 4), ints([1, 2, 0, 3]), Const(np.array(0.5)), ints([-1, 1])]),  # over two of three axes
    Case("Trilu", [r(3, 4)]), Case("Trilu", [r(2, 3, 4), ints(1)], {"upper": 0}),
    Case("CumSum", [r(3, 4), ints(1)]), Case("CumSum", [r(3, 4), ints(0)], {"exclusive": 1, "reverse": 1}),
    Case("Gather", [r(5, 3), ints([[0, 4], [4, 2]])]), Case("Gather", [r(2, 5), ints([3, 0, 3])], {"axis": 1}),
    Case("Gather", [r(2, 5), ints(2)], {"axis": 1}),
    Case("GatherElements", [r(3, 4), ints([[0, 2], [1, 1], [3, 0]])], {"axis": 1}),
    Case("GatherND", [r(3, 4), ints([[0, 1], [2, 3], [0, 1]])]),
    Case("ScatterElements", [r(3, 4), ints([[0, 2], [1, 3], [3, 0]]), r(3, 2)], {"axis": 1}),
    Case("ScatterND", [r(3, 4), ints([[0], [2]]), r(2, 4)]),
    Case("TopK", [distinct(3, 5), ints([2])], outputs=2),
    Case("TopK", [distinct(4, 3), ints([2])], {"axis": 0, "largest": 0}, outputs=2),
    Case("Einsum", [r(3, 4), r(4, 5)], {"equation": "ij,jk->ik"}),
    Case("Einsum", [r(2, 3, 4), r(2, 4)], {"equation": "bij,bj->bi"}),
    Case("LayerNormalization", [r(2, 3, 4), r(4), r(4)]),
    Case("LayerNormalization", [r(2, 3, 4), r(3, 4)], {"axis": -2}),
    Case("LayerNormalization", [r(2, 3, 4), r(1), r(4)]),  # a broadcast scale: the composed gradient
    Case("BatchNormalization", [r(4, 3, 2, 2), r(3, lo=0.5, hi=1.5), r(3), Const(r(3)), Const(r(3, lo=0.5, hi=1.5))],
         {"epsilon": 1e-3}),
    Case("BatchNormalization", [r(4, 3, 2), r(3, lo=0.5, hi=1.5), r(3), Const(r(3)), Const(r(3, lo=0.5, hi=1.5))],
         {"training_mode": 1}, rtol=1e-4),
    Case("BatchNormalization", [r(4, 3, 2, 2), r(3, lo=0.5, hi=1.5), r(3), r(3), r(3, lo=0.5, hi=1.5)],
         {"epsilon": 1e-3}),  # statistics that are trained through (an untracked BatchNorm's, as PyTorch exports it)
    Case("InstanceNormalization", [r(2, 3, 5), r(3), r(3)], rtol=1e-4),
    Case("Dropout", [r(4, 5), Const(np.array(0.3)), Const(np.array(True))], {"seed": 3}, outputs=2),
    Case("Dropout", [r(4, 5), Const(np.array(0.3)), Const(np.array(True))]),  # the mask from the run's seed
    Case("Dropout", [r(4, 5)]),
    # com.onnxtrain's: attribute `to` (float32 beside 16 bits, test_dropout_fusion.py) aside, ONNX's
    Case("Dropout", [r(4, 5), Const(np.array(0.3)), Const(np.array(True))], {"seed": 3}, outputs=2,
         domain="com.onnxtrain"),
    Case("Dropout", [r(4, 5), Const(np.array(0.3)), Const(np.array(True)), r(4, 5)], {"seed": 3},
         domain="com.onnxtrain"),  # (a residual added)
    Case("Conv", [r(2, 3, 5, 5), r(4, 3, 3, 3), r(4)], {"pads": [1, 1, 1, 1]}),
    Case("Conv", [r(1, 4, 7), r(4, 2, 3)], {"group": 2, "strides": [2], "dilations": [2]}),
    Case("Conv", [r(1, 2, 5, 6), r(2, 2, 2, 3)], {"auto_pad": "SAME_UPPER", "strides": [2, 1]}),
    Case("MaxPool", [distinct(2, 2, 4, 4)], {"kernel_shape": [2, 2], "strides": [2, 2]}),
    Case("MaxPool", [distinct(1, 2, 5)], {"kernel_shape": [3], "pads": [1, 1]}),
    Case("GlobalAveragePool", [r(2, 3, 2, 2)]), Case("GlobalMaxPool", [distinct(2, 3, 4)]),
    Case("AveragePool", [r(2, 2, 4, 5)], {"kernel_shape": [2, 2], "strides": [2, 2]}),
    Case("AveragePool", [r(1, 2, 5, 5)], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),  # overlapping windows
    Case("AveragePool", [r(1, 2, 5, 5)], {"kernel_shape": [3, 2], "pads": [1, 0, 1, 1], "count_include_pad": 1}),
    Case("AveragePool", [r(1, 1, 6)], {"kernel_shape": [3], "strides": [2], "ceil_mode": 1}),
    Case("AveragePool", [r(1, 2, 7, 6)], {"kernel_shape": [2, 2], "dilations": [2, 1], "auto_pad": "SAME_UPPER"}),
    Case("AveragePool", [r(1, 1, 3, 4, 4)], {"kernel_shape": [2, 2, 2], "strides": [1, 2, 2]}),
]
for op in ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"]:
    logp = r(4, 3) if op == "SoftmaxCrossEntropyLoss" else np.log(rng.dirichlet(np.ones(3), 4))
    labels = ints([0, 2, 1, 2])
    weights = Const(r(3, lo=0.5, hi=2))  # class weights are held fixed
    CASES += [Case(op, [logp, labels]), Case(op, [logp, labels, weights], {"reduction": "sum"}),
              Case(op, [logp, labels, weights], {"reduction": "mean", "ignore_index": 2}),
              Case(op, [r(2, 3, 4), ints([[0, 1, 2, 1], [2, 2, 0, 1]])], {"reduction": "none"})]

# Older opsets' forms: Upsample (scales an input at 9, an attribute at 7), Pad's pads an attribute (before 11).
CASES += [Case("Upsample", [r(1, 2, 3, 4), Const(np.array([1, 1, 2, 3], np.float32))], {"mode": mode}, opset=9)
          for mode in ("nearest", "linear")]
CASES += [Case("Upsample", [r(1, 2, 3, 4)], {"mode": "linear", "scales": [1.0, 1.0, 2.0, 1.5]}, opset=7),
          Case("Pad", [r(2, 3)], {"pads": [0, 1, 2, 0], "value": 0.5}, opset=7),
          Case("Slice", [r(4, 5)], {"starts": [1, -2], "ends": [3, 5], "axes": [0, 1]}, opset=9)]

# What linear_cross_entropy_fusion makes of a head and its loss: X of rank 3 flattened to rows, with or without
# a bias, the three reductions, an ignored target.
CASES += [Case("LinearCrossEntropy", [r(2, 3, 4), r(5, 4), r(5), ints([0, 4, 2, 1, 3, 4])], domain="com.onnxtrain"),
          Case("LinearCrossEntropy", [r(6, 4), r(5, 4), None, ints([0, 4, 2, 1, 3, 4])], {"reduction": "sum"},
               domain="com.onnxtrain"),
          Case("LinearCrossEntropy", [r(6, 4), r(5, 4), r(5), ints([0, 4, 2, 4, 3, 1])],
               {"reduction": "none", "ignore_index": 4}, domain="com.onnxtrain"),
          Case("LinearCrossEntropy", [r(6, 4), r(5, 4), r(5), ints([0, 4, -100, 1, -100, 2])],
               {"ignore_index": -100}, domain="com.onnxtrain")]
# RMSNorm (rms_norm_fusion's node): over the last dim, and over the last two
CASES += [Case("RMSNormalization", [r(2, 3, 5), r(5)], {"epsilon": 1e-5}, domain="com.onnxtrain"),
          Case("RMSNormalization", [r(2, 3, 4), r(3, 4)], {"axis": 1, "epsilon": 0.1}, domain="com.onnxtrain"),
          Case("SwiGLU", [r(2, 3, 5) * 4, r(2, 3, 5)], domain="com.onnxtrain"),
          # (norm_output_cast's node: ONNX's with Y of attribute `to`, 16 bits, which float64 differences cannot take)
          Case("LayerNormalization", [r(2, 3, 4), r(4), r(4)], {"axis": -1}, domain="com.onnxtrain")]
# Rotary embedding (rotary_embedding_fusion's node): cos and sin per batch and position, broadcast over the heads;
# of X's shape; halves of unequal cos and sin (the fusion reads any)
CASES += [Case("RotaryEmbedding", [r(2, 3, 4, 6), r(2, 1, 4, 6), r(2, 1, 4, 6)], domain="com.onnxtrain"),
          Case("RotaryEmbedding", [r(3, 4), r(3, 4), r(4)], domain="com.onnxtrain")]

# Ops of the table without a gradient rule, and why.
NOT_DIFFERENTIABLE = {
    **{op: "bool output" for op in ["Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Xor",
                                    "Not", "IsNaN", "IsInf"]},
    **{op: "integer output" for op in ["Shape", "Size", "ArgMax", "ArgMin", "Range"]},
    **{op: "no float input" for op in ["Constant", "ConstantOfShape", "OneHot"]},
    **{op: "gradient is zero almost everywhere" for op in ["Floor", "Ceil", "Round", "Sign", "Hardmax"]},
    **{op: "a random draw: no gradient flows through it (test_random_ops.py)"
       for op in ["RandomUniform", "RandomNormal", "RandomUniformLike", "RandomNormalLike", "Bernoulli"]},
    "com.onnxtrain.ResizeGrad": "itself a gradient op (checked through Resize)",
    "com.onnxtrain.AveragePoolGrad": "itself a gradient op (checked through AveragePool)",
    "Scatter": "deprecated op, no gradient rule", "com.onnxtrain.ConvGrad": "itself a gradient op",
    "com.onnxtrain.GeluGrad": "itself a gradient op (checked through Gelu)",
    "com.onnxtrain.MaskedSoftmaxGrad": "itself a gradient op (checked through MaskedSoftmax and AttentionSoftmax)",
    "com.onnxtrain.FlashAttentionGrad": "itself a gradient op (checked through FlashAttention)",
    "com.onnxtrain.RMSNormalizationGrad": "itself a gradient op (checked through RMSNormalization)",
    "com.onnxtrain.SwiGLUGrad": "itself a gradient op (checked through SwiGLU)",
    "com.onnxtrain.SliceGrad": "itself a gradient op (checked through Slice)",
    "com.onnxtrain.DropoutGrad": "itself a gradient op (checked through Dropout)",
    "com.onnxtrain.SoftmaxCrossEntropyLossGrad": "itself a gradient op (checked through SoftmaxCrossEntropyLoss)",
    "com.onnxtrain.LinearCrossEntropyGrad": "itself a gradient op (checked through LinearCrossEntropy)",
    "com.onnxtrain.LinearGradAdd": "itself a gradient op (of LinearCrossEntropy's scores: test_head_with_logits.py)",
    "com.onnxtrain.LayerNormalizationGrad": "itself a gradient op (checked through LayerNormalization)",
    "com.onnxtrain.GeluAndGrad": "made in backward only (equal to Gelu and GeluGrad: test_gelu_and_grad.py)",
    **{f"ai.onnx.preview.training.{op}": "an optimizer update" for op in ["Adam", "Adagrad", "Momentum"]},
    "com.onnxtrain.PythonOp": "a custom autograd Function: its own backward (test_python_op.py, against eager)",
    "com.onnxtrain.PythonOpGrad": "itself a gradient op (of PythonOp)",
    "com.onnxtrain.StopGradient": "no gradient by definition (PyTorch's detach; test_direct_capture.py)",
}


def test_every_op_is_checked_or_listed():
    checked = {f"{c.domain}.{c.op}" if c.domain else c.op for c in CASES}
    missing = [op for op in onnxtrain.registered_ops() if op not in checked and op not in NOT_DIFFERENTIABLE]
    assert not missing, f"ops with neither gradient cases nor a reason: {missing}"


@pytest.mark.parametrize("case", CASES, ids=[c.label for c in CASES])
def test_gradient(case):
    assert check(case) <= 1.0


def test_report(capsys):
    ops = {c.op for c in CASES}
    with capsys.disabled():
        print(f"\ngradient check: {len(ops)} ops, {len(CASES)} cases against float64 central differences; "
              f"{len(NOT_DIFFERENTIABLE)} ops listed as not differentiable")
