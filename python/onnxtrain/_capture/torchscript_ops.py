"""translations' op set over a TorchScript graph context, so that the TorchScript-based exporter's symbolics call
the translations the torch.export paths call: op.Name(*inputs, **attributes) becomes g.op("Name", ...) with each
attribute's type suffix, Python scalars and onnx_ir tensors become constants, and an op of several outputs returns
them all. Inputs the translations read (their dtype, as an ir.DataType, and shape, ints or None) are wrapped as
Typed."""

import onnx
import onnx_ir as ir
import torch
from torch.onnx import symbolic_helper as sh
from torch.onnx._internal.torchscript_exporter import _type_utils

from onnxtrain._capture.aten_values import onnx_dtype


class Typed:
    """A TorchScript value with what a translation reads of it: dtype and shape (None where the rank is unknown)."""

    def __init__(self, value):
        self.value = value
        self.dtype = onnx_dtype(_type_utils.JitScalarType.from_value(value, _type_utils.JitScalarType.FLOAT).dtype())
        sizes = sh._get_tensor_sizes(value)
        self.shape = None if sizes is None else tuple(sizes)


def _tensor(value):
    """A constant attribute's value as a torch tensor (a bfloat16 one, which numpy holds as ml_dtypes', by its
    bits)."""
    if isinstance(value, ir.TensorProtocol):
        if value.dtype == ir.DataType.BFLOAT16:
            return torch.from_numpy(value.numpy().view("uint16").copy()).view(torch.bfloat16)
        return torch.from_numpy(value.numpy().copy())
    return torch.tensor(value, dtype=torch.float32 if isinstance(value, float) else None)


class Ops:
    def __init__(self, g, opset):
        self.g, self.opset = g, opset

    def _input(self, x):
        if isinstance(x, Typed):
            return x.value
        if isinstance(x, (bool, int, float)):
            return self.g.op("Constant", value_t=_tensor(x))
        return x

    def _attributes(self, op_type, attributes):
        if op_type == "Constant":  # (one form for TorchScript: a tensor)
            (key, value), = attributes.items()
            return {"value_t": _tensor(value if key in ("value", "value_float", "value_int") else list(value))}
        suffix = {bool: "i", int: "i", float: "f", str: "s"}
        r = {}
        for key, value in attributes.items():
            kind = type(value[0]) if isinstance(value, (list, tuple)) and value else type(value)
            r[f"{key}_{suffix[kind]}"] = list(value) if isinstance(value, (list, tuple)) else value
        return r

    def __getattr__(self, op_type):
        def node(*inputs, **attributes):
            outputs = len(onnx.defs.get_schema(op_type, self.opset).outputs)
            return self.g.op(op_type, *[self._input(x) for x in inputs], outputs=outputs,
                             **self._attributes(op_type, attributes))
        return node
