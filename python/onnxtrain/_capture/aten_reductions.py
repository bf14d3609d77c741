"""Translations of ATen's reductions beyond aten_math's sums and means (max and min, with or without their
indices, argmax and argmin, log-sum-exp) into ONNX nodes for the direct capture (aten_to_onnx), called as
aten_math's are."""

import torch

from onnxtrain._capture.aten_values import floats_to, sizes

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


TABLE = {
    aten.amax.default: _reduce("ReduceMax"), aten.amin.default: _reduce("ReduceMin"),
    aten.logsumexp.default: _reduce("ReduceLogSumExp"), aten.max.dim: _with_index("ReduceMax", "ArgMax"),
    aten.min.dim: _with_index("ReduceMin", "ArgMin"), aten.argmax.default: _arg("ArgMax"),
    aten.argmin.default: _arg("ArgMin"),
}
