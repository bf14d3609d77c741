"""Translations of ATen's normalization layers (layer norm, RMSNorm, batch norm, group norm) into ONNX nodes for the
direct capture (aten_to_onnx), called as aten_math's are: each in the form onnxtrain's kernels or fusions take."""

import onnx_ir as ir
import torch

from onnxtrain._capture.aten_values import Untranslatable, cast, floats_to, typed

aten = torch.ops.aten


def layer_norm(out, b, x, normalized_shape, weight=None, bias=None, eps=1e-5, cudnn_enable=True):
    x, weight, bias = floats_to(b, out.dtype, x, weight, bias)
    if weight is None:
        weight = b.Expand(cast(b, 1.0, out.dtype), b.Shape(x, start=-len(normalized_shape)))
    y, *_ = b.LayerNormalization(x, weight, bias, axis=-len(normalized_shape), epsilon=float(eps))
    return y


def rms_norm(out, b, x, normalized_shape, weight=None, eps=None):
    """x / sqrt(mean(x^2) + eps) over the normalized dims, in float32 for 16-bit x, rounded back, then times the
    weight in the dtype they promote to (as PyTorch's rms_norm; eps by default the machine epsilon of the dtype it
    computes in): the form onnxtrain fuses."""
    dtype = out.dtype if out.dtype in (ir.DataType.FLOAT, ir.DataType.DOUBLE) else ir.DataType.FLOAT
    wide = cast(b, x, dtype)
    if eps is None:  # (of the computing dtype)
        eps = float(torch.finfo(torch.float32 if dtype == ir.DataType.FLOAT else torch.float64).eps)
    axes = b.ints(list(range(-len(normalized_shape), 0)))
    mean = b.ReduceMean(b.Pow(wide, cast(b, 2.0, dtype)), axes, keepdims=1)
    y = cast(b, typed(b.Mul(wide, b.Reciprocal(b.Sqrt(b.Add(mean, cast(b, eps, dtype))))), dtype, x.shape), x.dtype)
    return b.Mul(cast(b, y, out.dtype), cast(b, weight, out.dtype)) if weight is not None else y


def batch_norm(out, b, x, weight, bias, running_mean, running_var, training, momentum, eps, cudnn_enabled=False):
    """BatchNormalization: in training the batch's statistics, the running ones moved by `momentum` (the runner
    writes them back to the buffers, and counts the batch in num_batches_tracked); else the running ones. In the
    statistics' dtype: float32 ones of a bf16 input under autocast, as PyTorch computes, the result rounded to the
    input's dtype."""
    if training and momentum is None:
        raise Untranslatable("a batch norm of a cumulative moving average (momentum None)")
    dtype = next((v.dtype for v in (running_mean, weight) if v is not None), x.dtype)
    x, weight, bias = cast(b, x, dtype), *floats_to(b, dtype, weight, bias)

    def per_channel(value):
        return b.Expand(cast(b, value, dtype), b.Shape(x, start=1, end=2))

    weight, bias = per_channel(1.0) if weight is None else weight, per_channel(0.0) if bias is None else bias
    if running_mean is None:  # (not tracked: training-mode statistics, the running ones a stand-in nobody reads)
        running_mean, running_var, training = per_channel(0.0), per_channel(1.0), True
    y, *_ = b.BatchNormalization(x, weight, bias, running_mean, running_var, epsilon=float(eps),
                                 momentum=1.0 - float(momentum or 0.1), training_mode=int(bool(training)))
    return cast(b, typed(y, dtype, x.shape), out.dtype)


def group_norm(out, b, x, num_groups, weight=None, bias=None, eps=1e-5, cudnn_enabled=True):
    """Each sample's channels in `num_groups` groups, each group normalized over its channels and positions (an
    InstanceNormalization of x as (N, groups, the rest)), then the per-channel weight and bias."""
    x, weight, bias = floats_to(b, out.dtype, x, weight, bias)
    rank = len(x.shape)
    grouped = b.Reshape(x, b.ints([0, num_groups, -1]))
    ones = b.Expand(cast(b, 1.0, out.dtype), b.ints([num_groups]))
    zeros = b.Expand(cast(b, 0.0, out.dtype), b.ints([num_groups]))
    y = b.Reshape(b.InstanceNormalization(grouped, ones, zeros, epsilon=float(eps)), b.Shape(x))
    per_channel = b.ints([-1] + [1] * (rank - 2))
    if weight is not None:
        y = b.Mul(y, b.Reshape(weight, per_channel))
    return b.Add(y, b.Reshape(bias, per_channel)) if bias is not None else y


TABLE = {
    aten.group_norm.default: group_norm,
    aten.layer_norm.default: layer_norm, aten.rms_norm.default: rms_norm, aten.batch_norm.default: batch_norm,
}
