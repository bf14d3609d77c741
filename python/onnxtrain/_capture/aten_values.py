"""What the direct capture's translations (aten_math, aten_shapes) share: values cast as PyTorch computes them
(autocast's casts and type promotion, read from the graph's dtypes), sizes as int64 values, and the error that
sends a graph to PyTorch's exporter."""

import numpy as np
import onnx_ir as ir
import torch

from onnxtrain import _onnxtrain as C
from onnxtrain._capture.graph_builder import Value

INT64 = ir.DataType.INT64
FLOATS = {ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16, ir.DataType.DOUBLE}
DTYPES = {getattr(torch, name): ir.DataType(code) for name, code in C.dtypes()}  # PyTorch's that onnxtrain holds
_TORCH = {v: k for k, v in DTYPES.items()}
INT64_MAX = 2**63 - 1


class Untranslatable(Exception):
    """What the direct capture does not translate: PyTorch's exporter captures the module instead."""


def onnx_dtype(dtype):
    if dtype not in DTYPES:
        raise Untranslatable(f"a value of dtype {dtype}")
    return DTYPES[dtype]


def typed(v, dtype, shape=None):
    v.dtype, v.shape = dtype, shape
    return v


def cast(b, x, dtype):
    """x (a Value or a Python scalar) as `dtype`."""
    if not isinstance(x, Value):
        return b.constant(np.array(x, dtype=dtype.numpy()))
    return x if x.dtype == dtype else typed(b.Cast(x, to=int(dtype)), dtype, x.shape)


def floats_to(b, dtype, *xs):
    """The floating Values of xs cast to `dtype` (a floating dtype: what autocast and type promotion make of
    them), Python scalars as constants of it; other values as they are."""
    return [cast(b, x, dtype) if x is not None and (not isinstance(x, Value) or x.dtype in FLOATS) else x
            for x in xs]


def sizes(b, items):
    """A list of sizes (ints, or int64 Values of shape [1]) as one int64 Value of shape [len]."""
    parts, ints = [], []
    for x in items:
        if isinstance(x, Value):
            if ints:
                parts.append(b.ints(ints))
                ints = []
            parts.append(cast(b, x, INT64))
        elif isinstance(x, int):
            ints.append(x)
        else:
            raise Untranslatable(f"a size of type {type(x).__name__}")
    if ints or not parts:
        parts.append(b.ints(ints))
    return parts[0] if len(parts) == 1 else typed(b.Concat(*parts, axis=0), INT64, (len(items),))


def scalar_of(b, x):
    """A size (int or int64 Value of shape [1]) as a 0-d int64 value."""
    return b.constant(np.array(x, np.int64)) if isinstance(x, int) else b.Squeeze(x)


def result_dtype(a, b_):
    """The dtype PyTorch computes a binary op of a and b_ (Values or Python scalars) in."""
    def probe(x):
        return torch.empty((), dtype=_TORCH[x.dtype]) if isinstance(x, Value) else x
    if not isinstance(a, Value) and not isinstance(b_, Value):
        raise Untranslatable("an op of two scalars")
    return DTYPES[torch.result_type(probe(a), probe(b_))]
