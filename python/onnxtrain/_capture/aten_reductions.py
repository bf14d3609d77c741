"""Translations of ATen's reductions beyond aten_math's sums and means (max and min, with or without their
indices, argmax and argmin, log-sum-exp, variance and standard deviation) into ONNX nodes for the direct capture
(aten_to_onnx), called as aten_math's are."""

import math

import torch

from onnxtrain._capture.aten_values import cast, floats_to, sizes

aten = torch.ops.aten


def _axes(dim):
    return [dim] if isinstance(dim, int) else list(dim or [])


def _reduce(onnx_op):
    """amax, amin, logsumexp (x, dim, keepdim): over every dim where none is named."""
    def translate(out, b, x, dim=None, keepdim=False):
        (x,) = floats_to(b, out.dtype, x)
        axes = _axes(dim)
        if not axes:
            return getattr(b, onnx_op)(x, keepdims=int(keepdim))
        return getattr(b, onnx_op)(x, sizes(b, axes), keepdims=int(keepdim))
    return translate


def _with_index(reduce_op, arg_op):
    """max.dim and min.dim: the values and their indices along one dim (the first index where several tie)."""
    def translate(out, b, x, dim, keepdim=False):
        return (getattr(b, reduce_op)(x, sizes(b, [dim]), keepdims=int(keepdim)),
                getattr(b, arg_op)(x, axis=dim, keepdims=int(keepdim)))
    return translate


def _arg(arg_op):
    """argmax and argmin: along one dim, or over x flattened where none is named."""
    def translate(out, b, x, dim=None, keepdim=False):
        if dim is None:
            flat = getattr(b, arg_op)(b.Reshape(x, b.ints([-1])), axis=0, keepdims=0)
            return b.Reshape(flat, b.ints([1] * out.rank)) if keepdim else flat
        return getattr(b, arg_op)(x, axis=dim, keepdims=int(keepdim))
    return translate


def _variance(root):
    """var and std (their dim form, unbiased a bool, and their correction form): the mean of the squared
    deviations over the dims, its divisor the count less the correction (dims of static size)."""
    def translate(out, b, x, dim=None, unbiased=True, keepdim=False, correction=None):
        if correction is None:
            correction = 1 if unbiased else 0
        (x,) = floats_to(b, out.dtype, x)
        rank = len(x.shape)
        axes = [d % rank for d in _axes(dim)] or list(range(rank))
        deviation = b.Sub(x, b.ReduceMean(x, sizes(b, axes), keepdims=1))
        variance = b.ReduceMean(b.Mul(deviation, deviation), sizes(b, axes), keepdims=int(keepdim))
        if correction:  # the mean times count / max(count - correction, 0)
            if all(isinstance(x.shape[a], int) for a in axes):
                count = cast(b, math.prod(x.shape[a] for a in axes), out.dtype)
            else:
                count = b.Cast(b.ReduceProd(b.Gather(b.Shape(x), b.ints(axes)), keepdims=0), to=int(out.dtype))
            divisor = b.Max(b.Sub(count, cast(b, correction, out.dtype)), cast(b, 0.0, out.dtype))
            variance = b.Div(b.Mul(variance, count), divisor)
        return b.Sqrt(variance) if root else variance
    return translate


def _with_correction(root):
    def translate(out, b, x, dim=None, *, correction=None, keepdim=False):
        return _variance(root)(out, b, x, dim, True, keepdim, correction)
    return translate


TABLE = {
    aten.var.dim: _variance(False), aten.std.dim: _variance(True), aten.var.correction: _with_correction(False),
    aten.std.correction: _with_correction(True),
    aten.amax.default: _reduce("ReduceMax"), aten.amin.default: _reduce("ReduceMin"),
    aten.logsumexp.default: _reduce("ReduceLogSumExp"), aten.max.dim: _with_index("ReduceMax", "ArgMax"),
    aten.min.dim: _with_index("ReduceMin", "ArgMin"), aten.argmax.default: _arg("ArgMax"),
    aten.argmin.default: _arg("ArgMin"),
}
