"""Translations of ATen's arithmetic, activations, reductions, products and layers (linear, dropout,
softmax, attention, cross-entropy) into ONNX nodes, for the direct capture (aten_to_onnx). Each is called as
f(out, b, *args, **kwargs): `out` what is known of the op's value (dtype, shape, rank), `b` the GraphBuilder, then
the ATen op's arguments with tensors as Values and sizes as ints or int64 Values of shape [1]. Nodes are written as
PyTorch's exporter writes them after onnxscript's optimizer (rsqrt as Reciprocal(Sqrt), silu as x * Sigmoid(x),
linear as MatMul by the transposed weight, scalars as constants of the computing dtype), which is what onnxtrain's
fusions read; attention and cross-entropy are translations' own, shared with the exporter."""

import math

import numpy as np
import onnx_ir as ir
import torch

from onnxtrain._capture import translations
from onnxtrain._capture.aten_values import FLOATS, Untranslatable, cast, floats_to, result_dtype, sizes
from onnxtrain._capture.graph_builder import Value

aten = torch.ops.aten


def unary(onnx_op, **attrs):
    """An elementwise op of one input, in the result's dtype (`attrs`: the ONNX op's attributes)."""
    def translate(out, b, x):
        return getattr(b, onnx_op)(cast(b, x, out.dtype), **attrs)
    return translate


def _binary(onnx_op):
    def translate(out, b, x, y, alpha=1):
        x, y = cast(b, x, out.dtype), cast(b, y, out.dtype)  # (PyTorch's promotion, autocast's casts)
        if alpha != 1:
            y = b.Mul(y, cast(b, alpha, out.dtype))
        return getattr(b, onnx_op)(x, y)
    return translate


def remainder(out, b, x, y):
    """Python's remainder, of the divisor's sign."""
    x, y = cast(b, x, out.dtype), cast(b, y, out.dtype)
    if out.dtype not in FLOATS:
        return b.Mod(x, y, fmod=0)
    return b.Sub(x, b.Mul(b.Floor(b.Div(x, y)), y))


def _compare(onnx_op, negate=False):
    def translate(out, b, x, y):
        dtype = result_dtype(x, y)
        r = getattr(b, onnx_op)(cast(b, x, dtype), cast(b, y, dtype))
        return b.Not(r) if negate else r
    return translate


def _logical(bool_op, int_op):
    def translate(out, b, x, y):
        x, y = cast(b, x, out.dtype), cast(b, y, out.dtype)
        return getattr(b, bool_op if out.dtype == ir.DataType.BOOL else int_op)(x, y)
    return translate


def _same(out, b, x, *args, **kwargs):
    """An op that gives its input's value (contiguous, clone, alias, a move to the device it is on)."""
    if isinstance(x, Value) and out.dtype is not None and x.dtype != out.dtype:
        raise Untranslatable("a copy that changes the dtype")
    return x


def _to(out, b, x, *args, **kwargs):
    return cast(b, x, out.dtype)


def rsqrt(out, b, x):
    (x,) = floats_to(b, out.dtype, x)
    return b.Reciprocal(b.Sqrt(x))


def square(out, b, x):
    (x,) = floats_to(b, out.dtype, x)
    return b.Mul(x, x)


def silu(out, b, x):
    (x,) = floats_to(b, out.dtype, x)
    return b.Mul(x, b.Sigmoid(x))


def gelu(out, b, x, approximate="none"):
    (x,) = floats_to(b, out.dtype, x)
    dtype = out.dtype
    if approximate == "tanh":
        cube = b.Mul(b.Pow(x, cast(b, 3.0, dtype)), cast(b, 0.044715, dtype))
        inner = b.Mul(b.Add(x, cube), cast(b, math.sqrt(2 / math.pi), dtype))
        f = b.Tanh(inner)
    else:
        f = b.Erf(b.Div(x, cast(b, math.sqrt(2.0), dtype)))
    return b.Mul(b.Mul(x, cast(b, 0.5, dtype)), b.Add(f, cast(b, 1.0, dtype)))


def pow_scalar(out, b, x, exponent):
    (x,) = floats_to(b, out.dtype, x)
    return b.Pow(x, cast(b, exponent, out.dtype))


def pow_tensor(out, b, x, exponent):
    """x ** exponent, a tensor or a number either (PyTorch's promotion: both in the result's dtype)."""
    return b.Pow(cast(b, x, out.dtype), cast(b, exponent, out.dtype))


def clamp_tensor(out, b, x, min=None, max=None):
    """Bounds of any shape that broadcasts to x's: Max and Min."""
    x, lo, hi = floats_to(b, out.dtype, x, min, max)
    x = b.Max(x, lo) if lo is not None else x
    return b.Min(x, hi) if hi is not None else x


def rsub(out, b, x, other, alpha=1):
    x, other = cast(b, x, out.dtype), cast(b, other, out.dtype)
    return b.Sub(other, b.Mul(x, cast(b, alpha, out.dtype)) if alpha != 1 else x)


def _add_product(onnx_op):
    """addcmul and addcdiv: x + value * (t1 op t2)."""
    def translate(out, b, x, t1, t2, value=1):
        x, t1, t2 = floats_to(b, out.dtype, x, t1, t2)
        product = getattr(b, onnx_op)(t1, t2)
        return b.Add(x, b.Mul(product, cast(b, value, out.dtype)) if value != 1 else product)
    return translate


def lerp(out, b, x, end, weight):
    x, end, weight = floats_to(b, out.dtype, x, end, weight)
    return b.Add(x, b.Mul(weight, b.Sub(end, x)))


def einsum(out, b, equation, tensors, path=None):
    return b.Einsum(*floats_to(b, out.dtype, *tensors), equation=equation)


def outer(out, b, x, y):
    return b.Mul(b.Unsqueeze(cast(b, x, out.dtype), b.ints([-1])), cast(b, y, out.dtype))


def clamp(out, b, x, min=None, max=None):
    x, lo, hi = floats_to(b, out.dtype, x, min, max)
    return b.Clip(x, lo, hi)


def vector_norm(out, b, x, ord=2, dim=None, keepdim=False, dtype=None):
    """linalg_vector_norm of order 2 or 1 (F.normalize's and weight norm's): ReduceL2 or ReduceL1."""
    if ord not in (1, 2):
        raise Untranslatable(f"a vector norm of order {ord}")
    (x,) = floats_to(b, out.dtype, x)
    axes = [dim] if isinstance(dim, int) else list(dim or [])
    reduce = b.ReduceL2 if ord == 2 else b.ReduceL1
    return reduce(x, b.ints(axes), keepdims=int(keepdim)) if axes else reduce(x, keepdims=int(keepdim))


def mean_dim(out, b, x, dim=None, keepdim=False, dtype=None):
    (x,) = floats_to(b, out.dtype, x)
    if not dim:
        return b.ReduceMean(x, keepdims=int(keepdim))
    return b.ReduceMean(x, sizes(b, list(dim)), keepdims=int(keepdim))


def sum_dim(out, b, x, dim=None, keepdim=False, dtype=None):
    x = cast(b, x, out.dtype)
    if not dim:
        return b.ReduceSum(x, keepdims=int(keepdim))
    return b.ReduceSum(x, sizes(b, list(dim)), keepdims=int(keepdim))


def linear(out, b, x, weight, bias=None):
    x, weight, bias = floats_to(b, out.dtype, x, weight, bias)
    if bias is not None and len(x.shape) == 2:
        return b.Gemm(x, weight, bias, transB=1)
    y = b.MatMul(x, b.Transpose(weight, perm=[1, 0]))
    return y if bias is None else b.Add(y, bias)


def addmm(out, b, bias, m1, m2, beta=1, alpha=1):
    bias, m1, m2 = floats_to(b, out.dtype, bias, m1, m2)
    return b.Gemm(m1, m2, bias, alpha=float(alpha), beta=float(beta))


def baddbmm(out, b, base, batch1, batch2, beta=1, alpha=1):
    """beta * base + alpha * batch1 @ batch2 (ALiBi's biased attention scores, Bloom's); PyTorch ignores the base
    where beta is 0, NaNs included."""
    base, batch1, batch2 = floats_to(b, out.dtype, base, batch1, batch2)
    product = b.MatMul(batch1, batch2)
    if alpha != 1:
        product = b.Mul(product, cast(b, alpha, out.dtype))
    if beta == 0:
        return product
    return b.Add(b.Mul(base, cast(b, beta, out.dtype)) if beta != 1 else base, product)


def matmul(out, b, x, y):
    x, y = floats_to(b, out.dtype, x, y)
    return b.MatMul(x, y)


def embedding(out, b, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    if scale_grad_by_freq:
        raise Untranslatable("an embedding whose gradient is scaled by frequency")
    return translations.embedding(b, weight, indices, padding_idx)


def dropout(out, b, x, p, train):
    if not train or p == 0:
        return x
    if p >= 1:
        return b.Mul(x, cast(b, 0.0, x.dtype))
    y, _ = b.Dropout(x, float(p), True)
    return y


def _random(like_op):
    """rand/randn (size, ...) and rand_like/randn_like (x, ...): the ONNX Like op over x, or over zeros of the size;
    onnxtrain draws them from the step's seed and the node's key, as dropout."""
    def translate(out, b, *args, **kwargs):
        x = args[0]
        if not isinstance(x, Value):
            x = b.ConstantOfShape(sizes(b, list(x)), value=ir.tensor(np.zeros(1, out.dtype.numpy())))
        return getattr(b, like_op)(x, dtype=int(out.dtype))
    return translate


def bernoulli(out, b, x, p=None, generator=None):
    """bernoulli(probabilities) draws each element's, bernoulli(x, p) one p for all."""
    if p is None:
        return b.Bernoulli(x, dtype=int(out.dtype))
    return b.Cast(b.Less(b.RandomUniformLike(x, dtype=int(ir.DataType.FLOAT)), cast(b, float(p), ir.DataType.FLOAT)),
                  to=int(out.dtype))


def softmax(onnx_op):
    def translate(out, b, x, dim, half_to_float=False):
        (x,) = floats_to(b, out.dtype, x)
        return getattr(b, onnx_op)(x, axis=dim)
    return translate


def sdpa(out, b, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    q, k, v = floats_to(b, out.dtype, q, k, v)
    if attn_mask is not None and attn_mask.dtype in FLOATS:
        (attn_mask,) = floats_to(b, out.dtype, attn_mask)
    return translations.scaled_dot_product_attention(b, q, k, v, attn_mask, dropout_p, is_causal, scale,
                                                      enable_gqa)


def cross_entropy(out, b, x, target, weight=None, reduction=1, ignore_index=-100, label_smoothing=0.0):
    x, weight = floats_to(b, out.dtype, x, weight)
    return translations.cross_entropy_loss(b, x, target, weight, reduction, ignore_index, label_smoothing)


def where(out, b, cond, x, y):
    x, y = cast(b, x, out.dtype), cast(b, y, out.dtype)
    return b.Where(cond, x, y)


def masked_fill(out, b, x, mask, value):
    return b.Where(mask, cast(b, value, out.dtype), cast(b, x, out.dtype))


TABLE = {
    aten.add.Tensor: _binary("Add"), aten.sub.Tensor: _binary("Sub"), aten.mul.Tensor: _binary("Mul"),
    aten.div.Tensor: _binary("Div"), aten.add.Scalar: _binary("Add"), aten.sub.Scalar: _binary("Sub"),
    aten.mul.Scalar: _binary("Mul"), aten.div.Scalar: _binary("Div"), aten.maximum.default: _binary("Max"),
    aten.minimum.default: _binary("Min"), aten.min.other: _binary("Min"), aten.max.other: _binary("Max"),
    aten.remainder.Scalar: remainder, aten.remainder.Tensor: remainder, aten.pow.Tensor_Scalar: pow_scalar,
    aten.pow.Tensor_Tensor: pow_tensor, aten.pow.Scalar: pow_tensor,
    aten.neg.default: unary("Neg"), aten.tanh.default: unary("Tanh"), aten.relu.default: unary("Relu"),
    aten.abs.default: unary("Abs"), aten.log.default: unary("Log"), aten.exp.default: unary("Exp"),
    aten.sqrt.default: unary("Sqrt"), aten.sigmoid.default: unary("Sigmoid"), aten.sin.default: unary("Sin"),
    aten.cos.default: unary("Cos"), aten.floor.default: unary("Floor"), aten.clamp.default: clamp,
    aten.clamp_min.default: clamp, aten.clamp_max.default: lambda out, b, x, hi: clamp(out, b, x, None, hi),
    aten.linalg_vector_norm.default: vector_norm, aten.erf.default: unary("Erf"),
    aten.reciprocal.default: unary("Reciprocal"),
    aten.rsqrt.default: rsqrt, aten.square.default: square, aten.silu.default: silu, aten.gelu.default: gelu,
    aten.eq.Tensor: _compare("Equal"), aten.eq.Scalar: _compare("Equal"),
    aten.ne.Tensor: _compare("Equal", negate=True), aten.ne.Scalar: _compare("Equal", negate=True),
    aten.lt.Tensor: _compare("Less"), aten.lt.Scalar: _compare("Less"), aten.le.Tensor: _compare("LessOrEqual"),
    aten.le.Scalar: _compare("LessOrEqual"), aten.gt.Tensor: _compare("Greater"), aten.gt.Scalar: _compare("Greater"),
    aten.ge.Tensor: _compare("GreaterOrEqual"), aten.ge.Scalar: _compare("GreaterOrEqual"),
    aten.__and__.Tensor: _logical("And", "BitwiseAnd"), aten.bitwise_and.Tensor: _logical("And", "BitwiseAnd"),
    aten.__or__.Tensor: _logical("Or", "BitwiseOr"), aten.bitwise_or.Tensor: _logical("Or", "BitwiseOr"),
    aten.logical_not.default: unary("Not"), aten.bitwise_not.default: unary("Not"), aten.mean.dim: mean_dim,
    aten.mean.default: mean_dim, aten.sum.dim_IntList: sum_dim, aten.sum.default: sum_dim,
    aten.linear.default: linear, aten.addmm.default: addmm, aten.baddbmm.default: baddbmm,
    aten.matmul.default: matmul, aten.mm.default: matmul, aten.bmm.default: matmul, aten.embedding.default: embedding,
    aten.dropout.default: dropout, aten.rand.default: _random("RandomUniformLike"),
    aten.rand_like.default: _random("RandomUniformLike"), aten.randn.default: _random("RandomNormalLike"),
    aten.randn_like.default: _random("RandomNormalLike"), aten.bernoulli.default: bernoulli,
    aten.bernoulli.p: bernoulli, aten.softmax.int: softmax("Softmax"), aten.log_softmax.int: softmax("LogSoftmax"),
    aten.scaled_dot_product_attention.default: sdpa, aten.cross_entropy_loss.default: cross_entropy,
    aten.where.self: where, aten.where.ScalarOther: where, aten.where.ScalarSelf: where, aten.where.Scalar: where,
    aten.masked_fill.Scalar: masked_fill, aten.masked_fill.Tensor: masked_fill, aten.clamp.Tensor: clamp_tensor,
    aten.rsub.Scalar: rsub, aten.rsub.Tensor: rsub, aten.addcmul.default: _add_product("Mul"),
    aten.addcdiv.default: _add_product("Div"), aten.lerp.Scalar: lerp, aten.lerp.Tensor: lerp,
    aten.isnan.default: lambda out, b, x: b.IsNaN(x),
    aten.isinf.default: lambda out, b, x: b.IsInf(x), aten.logical_and.default: _logical("And", "And"),
    aten.logical_or.default: _logical("Or", "Or"), aten.logical_xor.default: _logical("Xor", "Xor"),
    aten.outer.default: outer, aten.einsum.default: einsum, aten.to.dtype: _to, aten.to.dtype_layout: _to,
    aten.to.device: _to, aten.type_as.default: _to, aten._to_copy.default: _to, aten.contiguous.default: _same,
    aten.clone.default: _same, aten.alias.default: _same, aten.lift_fresh_copy.default: _same,
    aten.detach.default: _same,
}
