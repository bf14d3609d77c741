"""Translations of ATen's activations beyond aten_math's (leaky ReLU, ELU, softplus, hard tanh and its kin, Mish,
GLU, sign) into ONNX nodes for the direct capture (aten_to_onnx), called as aten_math's are. Each becomes the ONNX
activation of that formula, which onnxtrain differentiates."""

import torch

from onnxtrain._capture.aten_math import clamp, unary
from onnxtrain._capture.aten_values import Untranslatable, cast, floats_to

aten = torch.ops.aten


def leaky_relu(out, b, x, negative_slope=0.01):
    (x,) = floats_to(b, out.dtype, x)
    return b.LeakyRelu(x, alpha=float(negative_slope))


def elu(out, b, x, alpha=1.0, scale=1.0, input_scale=1.0):
    if scale != 1 or input_scale != 1:
        raise Untranslatable("an ELU with scales (SELU's form)")
    (x,) = floats_to(b, out.dtype, x)
    return b.Elu(x, alpha=float(alpha))


def softplus(out, b, x, beta=1.0, threshold=20.0):
    """log(1 + exp(beta x)) / beta; PyTorch's x above the threshold is what the stable form gives there."""
    (x,) = floats_to(b, out.dtype, x)
    if beta == 1:
        return b.Softplus(x)
    return b.Div(b.Softplus(b.Mul(x, cast(b, beta, out.dtype))), cast(b, beta, out.dtype))


def celu(out, b, x, alpha=1.0):
    (x,) = floats_to(b, out.dtype, x)
    return b.Celu(x, alpha=float(alpha))


def glu(out, b, x, dim=-1):
    """The first half of x along `dim` times the sigmoid of the second (a dim of static size)."""
    (x,) = floats_to(b, out.dtype, x)
    size = x.shape[dim] if x.shape is not None else None
    if not isinstance(size, int):
        raise Untranslatable("a GLU over a dim of symbolic size")
    first, second = b.op("Split", x, b.ints([size // 2, size // 2]), axis=dim, _outputs=2)
    return b.Mul(first, b.Sigmoid(second))


TABLE = {
    aten.leaky_relu.default: leaky_relu, aten.elu.default: elu, aten.softplus.default: softplus,
    aten.hardtanh.default: lambda out, b, x, min_val=-1.0, max_val=1.0: clamp(out, b, x, min_val, max_val),
    aten.relu6.default: lambda out, b, x: clamp(out, b, x, 0.0, 6.0), aten.glu.default: glu,
    aten.mish.default: unary("Mish"), aten.hardswish.default: unary("HardSwish"),
    aten.hardsigmoid.default: unary("HardSigmoid", alpha=1 / 6, beta=0.5), aten.sign.default: unary("Sign"),
    aten.selu.default: unary("Selu"), aten.celu.default: celu,
}
