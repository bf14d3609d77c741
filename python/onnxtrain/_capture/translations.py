"""onnxtrain's own translations of ATen ops for the torch.export-based exporter, where its defaults do not train:
BatchNorm in training mode (the defaults normalize by the running statistics and never update them), embeddings with
a padding index (the defaults give the padding row a gradient), cross-entropy with label smoothing (the default
drops the smoothing) and scaled_dot_product_attention (written as the flash attention fusion reads it: grouped-query
attention broadcast rather than repeated, bool masks additive with fully masked rows giving 0 as PyTorch does,
dropout applied). Each is written against an `op` in onnxscript's style: onnxscript's opset for the exporter
(TABLE), a graph_builder.GraphBuilder for onnxtrain's direct capture (aten_math), torchscript_ops.Ops for the
TorchScript-based exporter (symbolics)."""

import inspect
import math

import numpy as np
import onnx
import onnx_ir as ir
import torch


def _ints(op, values):
    return op.Constant(value_ints=list(values))


def _const(op, value, dtype):
    """A scalar constant of an ir.DataType (a Constant node, so it holds under autocast and fusions read it)."""
    return op.Constant(value=ir.tensor(np.array(value, dtype=dtype.numpy())))


def batch_norm_training(op, x, weight=None, bias=None, running_mean=None, running_var=None, training=False,
                        momentum=0.9, eps=1e-05):
    """aten::_native_batch_norm_legit_functional -> (y, batch mean, batch 1/std, new running mean, new running var).
    In training the statistics are the batch's and the running ones move (BatchNormalization's training mode);
    the batch mean and 1/std are for PyTorch's own backward (unused here: onnxtrain differentiates the graph)."""
    channels = op.Shape(x, start=1, end=2)
    if weight is None:
        weight = op.Expand(op.CastLike(op.Constant(value_float=1.0), x), channels)
    if bias is None:
        bias = op.Expand(op.CastLike(op.Constant(value_float=0.0), x), channels)
    if not training:
        y = op.BatchNormalization(x, weight, bias, running_mean, running_var, epsilon=eps)
        return y, running_mean, running_var, running_mean, running_var
    y, new_mean, new_var = op.BatchNormalization(x, weight, bias, running_mean, running_var, epsilon=eps,
                                                 momentum=1.0 - momentum, training_mode=1)
    axes = _ints(op, [d for d in range(len(x.shape)) if d != 1])
    centered = op.Sub(x, op.ReduceMean(x, axes, keepdims=1))
    variance = op.ReduceMean(op.Mul(centered, centered), axes, keepdims=0)
    rstd = op.Reciprocal(op.Sqrt(op.Add(variance, op.CastLike(op.Constant(value_float=eps), x))))
    return y, op.ReduceMean(x, axes, keepdims=0), rstd, new_mean, new_var


def _grouped(op, x, kv_heads, groups):
    """(B, H, ...) -> (B, kv_heads, groups, ...): head h = j * groups + i is group i of key-value head j."""
    return op.Reshape(op.Unsqueeze(x, _ints(op, [1])), _ints(op, [0, kv_heads, groups, -1, 0]))


def _fail(message):
    raise NotImplementedError(f"onnxtrain: scaled_dot_product_attention: {message}")


def _grouped_mask(op, mask, q_heads, kv_heads, groups):
    """An attention mask broadcast to (B, H, L, S), for scores grouped as (B, kv_heads, groups, L, S)."""
    rank = len(mask.shape)
    if rank <= 2:
        return mask
    heads = mask.shape[-3]
    if rank == 3:
        mask = op.Unsqueeze(mask, _ints(op, [0]))
    if heads == 1:
        return op.Unsqueeze(mask, _ints(op, [1]))
    if heads == q_heads:
        return _grouped(op, mask, kv_heads, groups)
    return _fail(f"a mask of {heads} heads for {q_heads} query heads")


def _static(dim):
    return dim if isinstance(dim, int) else None


def scaled_dot_product_attention(op, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False):
    """Softmax(Q K^T scale + mask) V: the scale a constant on the scores (of Q's dtype, so it holds under autocast),
    a bool mask (or is_causal's) turned additive with fully masked rows giving 0, dropout applied whenever
    dropout_p > 0 (as PyTorch does), grouped-query attention (enable_gqa) a broadcast of K and V over each group of
    query heads: they are never repeated."""
    if is_causal and attn_mask is not None:
        _fail("is_causal and attn_mask cannot be set at the same time")
    dtype = q.dtype  # (the values made here have no dtype yet: the exporter traces them untyped)
    q_heads, kv_heads = _static(q.shape[-3]), _static(k.shape[-3])
    head_size = _static(q.shape[-1])
    y_shape, groups, rank = None, 1, len(k.shape)
    if enable_gqa and q_heads != kv_heads:
        if len(q.shape) != 4 or q_heads is None or kv_heads is None or q_heads % kv_heads:
            _fail("grouped-query attention needs (B, H, L, E) operands with known head counts, H a multiple of "
                  "the key-value heads")
        groups = q_heads // kv_heads
        y_shape = op.Concat(op.Shape(q, start=0, end=3), op.Shape(v, start=3, end=4), axis=0)
        q = _grouped(op, q, kv_heads, groups)
        k, v = op.Unsqueeze(k, _ints(op, [2])), op.Unsqueeze(v, _ints(op, [2]))
        rank += 1
    perm = list(range(rank))
    perm[-2], perm[-1] = perm[-1], perm[-2]
    scores = op.MatMul(q, op.Transpose(k, perm=perm))
    if scale is not None:
        scores = op.Mul(scores, _const(op, scale, dtype))
    elif head_size is not None:
        scores = op.Mul(scores, _const(op, 1.0 / math.sqrt(head_size), dtype))
    else:
        scores = op.Div(scores, op.Sqrt(op.CastLike(op.Shape(q, start=-1), scores)))
    mask, bool_mask = attn_mask, attn_mask is not None and attn_mask.dtype == ir.DataType.BOOL
    if is_causal:
        lengths = op.Concat(op.Shape(q, start=-2, end=-1), op.Shape(k, start=-2, end=-1), axis=0)
        mask = op.Trilu(op.Expand(op.Constant(value=ir.tensor(np.array(True))), lengths), upper=0)
        bool_mask = True
    elif mask is not None and groups > 1:
        mask = _grouped_mask(op, mask, q_heads, kv_heads, groups)
    zero_masked_rows = False
    if mask is not None:
        if bool_mask:
            zero_masked_rows = not is_causal  # (a causal mask leaves a key to every row)
            mask = op.Where(mask, _const(op, 0.0, dtype), _const(op, -math.inf, dtype))
        scores = op.Add(scores, mask)
    probs = op.Softmax(scores, axis=-1)
    if zero_masked_rows:
        probs = op.Where(op.IsNaN(probs), _const(op, 0.0, dtype), probs)
    if dropout_p > 0:
        probs, _ = op.Dropout(probs, dropout_p, True)
    y = op.MatMul(probs, v)
    return y if y_shape is None else op.Reshape(y, y_shape)


_REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}  # torch's reduction enum


def cross_entropy_loss(op, x, target, weight=None, reduction=1, ignore_index=-100, label_smoothing=0.0):
    """aten::cross_entropy_loss, label smoothing included (the exporter's default drops it). Class indices:
    SoftmaxCrossEntropyLoss (what the linear-cross-entropy fusion reads), plus the smoothing term, the mean over
    classes of -log p (class-weighted as PyTorch weighs it), zero where the target is ignored. Class probabilities:
    -sum(target' log p) over the class dim (1), target' = target (1 - e) + e / classes."""
    dtype = x.dtype

    def classes():  # (made only where smoothing reads it: nothing else may read the logits the fusion takes)
        return op.CastLike(op.Shape(x, start=1, end=2), x)
    if target.dtype != ir.DataType.INT64 and target.dtype != ir.DataType.INT32:
        logp = op.LogSoftmax(x, axis=1)
        if label_smoothing > 0:
            target = op.Add(op.Mul(target, _const(op, 1 - label_smoothing, dtype)),
                            op.Div(_const(op, label_smoothing, dtype), classes()))
        terms = op.Mul(logp, target)
        if weight is not None:
            shape = [1, -1] + [1] * (len(x.shape) - 2)
            terms = op.Mul(terms, op.Reshape(weight, _ints(op, shape)))
        loss = op.Neg(op.ReduceSum(terms, _ints(op, [1]), keepdims=0))
        if reduction == 1:
            return op.Div(op.ReduceSum(loss, keepdims=0), op.CastLike(op.Size(loss), loss))
        return op.ReduceSum(loss, keepdims=0) if reduction == 2 else loss
    args = [x, target] + ([] if weight is None else [weight])
    nll, _ = op.SoftmaxCrossEntropyLoss(*args, reduction=_REDUCTIONS[reduction], ignore_index=ignore_index)
    if label_smoothing <= 0:
        return nll
    logp = op.LogSoftmax(x, axis=1)
    if weight is not None:
        shape = [1, -1] + [1] * (len(x.shape) - 2)
        logp = op.Mul(logp, op.Reshape(weight, _ints(op, shape)))
    smooth = op.Div(op.Neg(op.ReduceSum(logp, _ints(op, [1]), keepdims=0)), classes())
    valid = op.CastLike(op.Not(op.Equal(target, op.CastLike(op.Constant(value_int=ignore_index), target))), x)
    smooth = op.Mul(smooth, valid)
    if reduction == 2:
        smooth = op.ReduceSum(smooth, keepdims=0)
    elif reduction == 1:
        if weight is None:
            count = op.ReduceSum(valid, keepdims=0)
        else:  # PyTorch divides by the targets' summed weight
            count = op.ReduceSum(op.Mul(op.Gather(weight, op.Mul(target, op.CastLike(valid, target))), valid),
                                 keepdims=0)
        smooth = op.Div(op.ReduceSum(smooth, keepdims=0), count)
    return op.Add(op.Mul(nll, _const(op, 1 - label_smoothing, dtype)),
                  op.Mul(smooth, _const(op, label_smoothing, dtype)))


def _stop_gradient(op, x):
    """com.onnxtrain.StopGradient(x): x, through which no gradient flows (its schema registered with onnx for the
    exporter, which checks each node against one)."""
    from onnxscript import values

    from onnxtrain._capture.graph_builder import GraphBuilder
    from onnxtrain._capture.torchscript_ops import Ops

    if isinstance(op, GraphBuilder):
        return op.op("StopGradient", x, _domain="com.onnxtrain")
    if isinstance(op, Ops):
        return op.g.op("com.onnxtrain::StopGradient", op._input(x))

    if not onnx.defs.has("StopGradient", "com.onnxtrain"):
        p = onnx.defs.OpSchema.FormalParameter
        onnx.defs.register_schema(onnx.defs.OpSchema(
            "StopGradient", "com.onnxtrain", 1, inputs=[p("x", "T")], outputs=[p("y", "T")],
            type_constraints=[("T", [f"tensor({t})" for t in ("float", "double", "float16", "bfloat16")], "")]))
    return values.Opset("com.onnxtrain", 1).StopGradient(x)


def embedding(op, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    """A Gather; with a padding index, the rows gathered at it taken through com.onnxtrain.StopGradient, so that
    the padding row gets no gradient from them (as PyTorch's embedding gives it none: the exporter's default
    translation gives it theirs). Not scaled by frequency."""
    if scale_grad_by_freq:
        raise NotImplementedError("onnxtrain: an embedding whose gradient is scaled by frequency")
    rows = op.Gather(weight, indices, axis=0)
    if padding_idx is None or padding_idx < 0:
        return rows
    at_padding = op.Unsqueeze(op.Equal(indices, op.CastLike(op.Constant(value_int=padding_idx), indices)),
                              _ints(op, [-1]))
    return op.Where(at_padding, _stop_gradient(op, rows), rows)


def _exporter(translation):
    """`translation` as PyTorch's exporter calls it (the ATen op's arguments), with onnxscript's opset."""
    from onnxscript import opset18

    def call(*args, **kwargs):
        return translation(opset18, *args, **kwargs)

    call.__signature__ = inspect.signature(translation).replace(
        parameters=list(inspect.signature(translation).parameters.values())[1:])
    call.__name__ = translation.__name__
    return call


TABLE = {
    torch.ops.aten.embedding.default: _exporter(embedding),
    torch.ops.aten.cross_entropy_loss.default: _exporter(cross_entropy_loss),
    torch.ops.aten._native_batch_norm_legit_functional.default: _exporter(batch_norm_training),
    torch.ops.aten.scaled_dot_product_attention.default: _exporter(scaled_dot_product_attention),
}
