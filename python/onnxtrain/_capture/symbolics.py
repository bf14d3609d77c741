"""onnxtrain's own ONNX translations for what PyTorch's TorchScript-based exporter cannot export: losses (l1, smooth
l1, huber, binary cross entropy, cross entropy with label smoothing), rms_norm, diff, embeddings with a padding
index (the default gives the padding row a gradient) and scaled_dot_product_attention (grouped-query attention,
dropout in training), each written with ordinary ONNX ops (so their gradients come from onnxtrain's op table)."""

import torch
from torch.onnx import symbolic_helper as sh

from onnxtrain._capture import translations
from onnxtrain._capture.torchscript_ops import Ops, Typed

OPSET = 18
_NONE, _MEAN, _SUM = 0, 1, 2  # torch's reduction enum


def _const(g, value, like=None):
    c = g.op("Constant", value_t=torch.tensor(value, dtype=torch.float32))
    return g.op("CastLike", c, like) if like is not None else c


def _reduce(g, x, reduction):
    if reduction == _MEAN:
        return g.op("ReduceMean", x, keepdims_i=0)
    if reduction == _SUM:
        return g.op("ReduceSum", x, keepdims_i=0)
    return x


@sh.parse_args("v", "v", "i")
def l1_loss(g, x, y, reduction):
    return _reduce(g, g.op("Abs", g.op("Sub", x, y)), reduction)


def _piecewise(g, x, y, limit, small, large):
    d = g.op("Abs", g.op("Sub", x, y))
    return g.op("Where", g.op("Less", d, _const(g, limit, d)), small(d), large(d))


@sh.parse_args("v", "v", "i", "f")
def smooth_l1_loss(g, x, y, reduction, beta):
    half = lambda d: g.op("Mul", _const(g, 0.5, d), d)  # noqa: E731
    loss = _piecewise(g, x, y, beta,
                      lambda d: g.op("Div", g.op("Mul", half(d), d), _const(g, beta, d)) if beta > 0 else d,
                      lambda d: g.op("Sub", d, _const(g, 0.5 * beta, d)))
    return _reduce(g, loss, reduction)


@sh.parse_args("v", "v", "i", "f")
def huber_loss(g, x, y, reduction, delta):
    loss = _piecewise(g, x, y, delta,
                      lambda d: g.op("Mul", _const(g, 0.5, d), g.op("Mul", d, d)),
                      lambda d: g.op("Mul", _const(g, delta, d), g.op("Sub", d, _const(g, 0.5 * delta, d))))
    return _reduce(g, loss, reduction)


@sh.parse_args("v", "v", "v", "i")
def binary_cross_entropy(g, p, y, weight, reduction):
    # torch clamps each log at -100
    floor = lambda v: g.op("Max", g.op("Log", v), _const(g, -100.0, v))  # noqa: E731
    one = _const(g, 1.0, p)
    miss = g.op("Mul", g.op("Sub", one, y), floor(g.op("Sub", one, p)))
    loss = g.op("Neg", g.op("Add", g.op("Mul", y, floor(p)), miss))
    if not sh._is_none(weight):
        loss = g.op("Mul", loss, weight)
    return _reduce(g, loss, reduction)


@sh.parse_args("v", "v", "v", "i", "i", "f")
def cross_entropy_loss(g, x, target, weight, reduction, ignore_index, label_smoothing):
    names = {_NONE: "none", _MEAN: "mean", _SUM: "sum"}
    logp = g.op("LogSoftmax", x, axis_i=1)
    args = [logp, target] + ([] if sh._is_none(weight) else [weight])
    nll = g.op("NegativeLogLikelihoodLoss", *args, reduction_s=names[reduction], ignore_index_i=ignore_index)
    if label_smoothing <= 0:
        return nll
    if not sh._is_none(weight):
        raise torch.onnx.errors.SymbolicValueError("onnxtrain: cross_entropy with both weight and label_smoothing "
                                                   "is not supported yet", x)
    # smoothing term: the mean over classes of -log p, zero where the target is ignored
    smooth = g.op("Neg", g.op("ReduceMean", logp, g.op("Constant", value_t=torch.tensor([1])), keepdims_i=0))
    valid = g.op("Cast", g.op("Not", g.op("Equal", target, g.op("Constant", value_t=torch.tensor(ignore_index)))),
                 to_i=sh.cast_pytorch_to_onnx["Float"])
    valid = g.op("CastLike", valid, smooth)
    smooth = g.op("Mul", smooth, valid)
    if reduction == _SUM:
        smooth = g.op("ReduceSum", smooth, keepdims_i=0)
    elif reduction == _MEAN:
        smooth = g.op("Div", g.op("ReduceSum", smooth, keepdims_i=0), g.op("ReduceSum", valid, keepdims_i=0))
    eps = label_smoothing
    return g.op("Add", g.op("Mul", _const(g, 1 - eps, nll), nll), g.op("Mul", _const(g, eps, smooth), smooth))


def rms_norm(g, x, normalized_shape, weight, eps):
    dims = sh._get_const(normalized_shape, "is", "normalized_shape")
    axes = g.op("Constant", value_t=torch.tensor(list(range(-len(dims), 0))))
    eps_value = sh._maybe_get_const(eps, "f")
    if sh._is_value(eps_value) or eps_value is None:
        eps_value = torch.finfo(torch.float32).eps
    ms = g.op("ReduceMean", g.op("Mul", x, x), axes, keepdims_i=1)
    y = g.op("Mul", x, g.op("Reciprocal", g.op("Sqrt", g.op("Add", ms, _const(g, eps_value, ms)))))
    return y if sh._is_none(weight) else g.op("Mul", y, weight)


@sh.parse_args("v", "i", "i", "v", "v")
def diff(g, x, n, dim, prepend, append):
    if n != 1:
        raise torch.onnx.errors.SymbolicValueError("onnxtrain: torch.diff is translated for n=1", x)
    parts = [v for v in (prepend, x, append) if not sh._is_none(v)]
    if len(parts) > 1:
        x = g.op("Concat", *parts, axis_i=dim)
    axes = g.op("Constant", value_t=torch.tensor([dim]))
    big = g.op("Constant", value_t=torch.tensor([2**62]))
    head = g.op("Slice", x, g.op("Constant", value_t=torch.tensor([1])), big, axes)
    zero, last = (g.op("Constant", value_t=torch.tensor([i])) for i in (0, -1))
    tail = g.op("Slice", x, zero, last, axes)
    return g.op("Sub", head, tail)


@sh.parse_args("v", "v", "v", "v", "f", "b", "v", "b")
def scaled_dot_product_attention(g, q, k, v, mask, dropout_p, is_causal, scale, enable_gqa):
    """translations.scaled_dot_product_attention, which the torch.export paths call too, over this graph."""
    if any(sh._get_tensor_rank(x) is None for x in (q, k, v)):
        raise torch.onnx.errors.SymbolicValueError("onnxtrain: scaled_dot_product_attention: the operands' ranks "
                                                   "must be known", q)
    if not sh._is_none(scale):
        scale = sh._maybe_get_const(scale, "f")
        if sh._is_value(scale):
            raise torch.onnx.errors.SymbolicValueError("onnxtrain: scaled_dot_product_attention: a scale that is "
                                                       "not a constant", q)
    else:
        scale = None
    mask = None if sh._is_none(mask) else Typed(mask)
    return translations.scaled_dot_product_attention(Ops(g, OPSET), Typed(q), Typed(k), Typed(v), mask, dropout_p,
                                                      is_causal, scale, enable_gqa)


@sh.parse_args("v", "v", "i", "b", "b")
def embedding(g, weight, indices, padding_idx, scale_grad_by_freq, sparse):
    """translations.embedding: the padding row gets no gradient from the rows gathered at it."""
    if scale_grad_by_freq:
        raise torch.onnx.errors.SymbolicValueError("onnxtrain: an embedding whose gradient is scaled by frequency",
                                                   weight)
    return translations.embedding(Ops(g, OPSET), Typed(weight), Typed(indices), padding_idx)


def register():
    for name, fn in [("l1_loss", l1_loss), ("smooth_l1_loss", smooth_l1_loss), ("huber_loss", huber_loss),
                     ("binary_cross_entropy", binary_cross_entropy), ("cross_entropy_loss", cross_entropy_loss),
                     ("rms_norm", rms_norm), ("diff", diff), ("embedding", embedding),
                     ("scaled_dot_product_attention", scaled_dot_product_attention)]:
        torch.onnx.register_custom_op_symbolic(f"aten::{name}", fn, OPSET)
