"""An ONNX graph built by calls in onnxscript's style, `b.MatMul(x, w)` or `b.Shape(x, start=1)`, so that one
translation serves both PyTorch's exporter (called with onnxscript's opset) and onnxtrain's direct capture (called
with a GraphBuilder): values know their dtype (onnx_ir's DataType) and, where known, their shape; Python scalars
given as inputs become constants as onnxscript makes them (bool, int64, float32); every constant becomes an
initializer (where onnxtrain's fusions read scalars from); outputs are as many as the op's schema declares, and
the unused optional ones are dropped when the graph is done."""

import numpy as np
import onnx
import onnx_ir as ir
from onnx import helper

OPSET = 18

_ATTRIBUTE_TYPES = {
    onnx.defs.OpSchema.AttrType.FLOAT: float, onnx.defs.OpSchema.AttrType.INT: int,
    onnx.defs.OpSchema.AttrType.FLOATS: lambda v: [float(x) for x in v],
    onnx.defs.OpSchema.AttrType.INTS: lambda v: [int(x) for x in v],
}


class Value:
    """A value of the graph being built: its name, dtype (ir.DataType, or None where not tracked) and shape (a tuple
    of ints, None for a symbolic dim; None where not tracked)."""

    __slots__ = ("name", "dtype", "shape")

    def __init__(self, name, dtype=None, shape=None):
        self.name, self.dtype, self.shape = name, dtype, shape

    def __repr__(self):
        return f"Value({self.name}, {self.dtype}, {self.shape})"


class GraphBuilder:
    def __init__(self):
        self.nodes, self.initializers = [], []
        self._names = set()
        self._constants = {}
        self._transposed = {}  # a Transpose's output -> (its input, its perm)
        self._reshaped = {}  # a Reshape's output -> its input
        self.hint = ""  # what new values are named after (the ATen node being translated)

    def fresh(self, hint):
        """A name not used yet, from `hint`."""
        name, k = hint, 0
        while name in self._names:
            k += 1
            name = f"{hint}_{k}"
        self._names.add(name)
        return name

    def constant(self, array, hint="const"):
        """An initializer holding `array` (numpy, bfloat16 as ml_dtypes', or an onnx_ir tensor); one per value
        (so that onnxtrain's common subexpressions see equal sizes as one)."""
        tensor = array if isinstance(array, ir.TensorProtocol) else ir.tensor(np.asarray(array))
        key = (tensor.dtype, tuple(tensor.shape), tensor.numpy().tobytes())
        if key not in self._constants:
            proto = ir.serde.serialize_tensor(tensor)
            proto.name = self.fresh(hint)
            self.initializers.append(proto)
            self._constants[key] = Value(proto.name, tensor.dtype, tuple(tensor.shape))
        return self._constants[key]

    def ints(self, values):
        """A 1-D int64 initializer of `values`."""
        return self.constant(np.array(list(values), np.int64))

    def _input(self, x):
        if x is None:
            return ""
        if isinstance(x, Value):
            return x.name
        if isinstance(x, bool):
            return self.constant(np.array(x)).name
        if isinstance(x, int):
            return self.constant(np.array(x, np.int64)).name
        if isinstance(x, float):
            return self.constant(np.array(x, np.float32)).name
        raise TypeError(f"onnxtrain: an input of type {type(x).__name__} to an ONNX node")

    def op(self, op_type, *inputs, _outputs=None, _domain="", **attributes):
        """A node of `op_type`: its output Value, or a tuple of them where the schema declares several."""
        if op_type == "Constant" and not _domain:
            return self._constant_node(**attributes)
        if op_type == "Transpose" and "perm" in attributes and inputs[0].name in self._transposed:  # one of two
            source, first = self._transposed[inputs[0].name]
            perm = [first[i] for i in attributes["perm"]]
            if perm == sorted(perm):
                return source
            inputs, attributes = (source,), {"perm": perm}
        if op_type == "Reshape" and attributes.get("allowzero") == 1 and inputs[0].name in self._reshaped:
            inputs = (self._reshaped[inputs[0].name], *inputs[1:])  # a reshape of a reshape: one
        schema = onnx.defs.get_schema(op_type, OPSET, _domain) if onnx.defs.has(op_type, _domain) else None
        names = [self._input(x) for x in inputs]
        while names and names[-1] == "":
            names.pop()
        count = _outputs or (len(schema.outputs) if schema else 1)  # (onnxtrain's own ops: one unless told)
        outs = [self.fresh(self.hint or op_type.lower()) for _ in range(count)]
        attrs = {}
        for key, value in attributes.items():
            if value is None:
                continue
            if isinstance(value, ir.TensorProtocol):
                value = ir.serde.serialize_tensor(value)
            kind = schema.attributes[key].type if schema and key in schema.attributes else None
            attrs[key] = _ATTRIBUTE_TYPES.get(kind, lambda v: v)(value)
        self.nodes.append(helper.make_node(op_type, names, outs, domain=_domain or None, **attrs))
        values = tuple(Value(n) for n in outs)
        if op_type == "Transpose" and "perm" in attrs:
            self._transposed[outs[0]] = (inputs[0], list(attrs["perm"]))
        if op_type == "Reshape" and attrs.get("allowzero") == 1:
            self._reshaped[outs[0]] = inputs[0]
        return values if count > 1 else values[0]

    def _constant_node(self, value=None, value_ints=None, value_int=None, value_float=None, value_floats=None):
        if value is not None:
            return self.constant(value)
        if value_ints is not None:
            return self.ints(value_ints)
        if value_int is not None:
            return self.constant(np.array(value_int, np.int64))
        if value_float is not None:
            return self.constant(np.array(value_float, np.float32))
        return self.constant(np.array(value_floats, np.float32))

    def __getattr__(self, op_type):
        if not op_type[:1].isupper():
            raise AttributeError(op_type)
        return lambda *inputs, **attributes: self.op(op_type, *inputs, **attributes)

    def finish(self, outputs):
        """The nodes with the optional outputs nobody reads dropped (trailing ones; inner ones renamed empty)."""
        read = {n for node in self.nodes for n in node.input} | set(outputs)
        for node in self.nodes:
            if not onnx.defs.has(node.op_type, node.domain):  # (onnxtrain's own ops: every output is read)
                continue
            schema = onnx.defs.get_schema(node.op_type, OPSET, node.domain)
            for i in range(len(node.output)):
                optional = i < len(schema.outputs) and \
                    schema.outputs[i].option == onnx.defs.OpSchema.FormalParameterOption.Optional
                if optional and node.output[i] not in read:
                    node.output[i] = ""
            while len(node.output) > 1 and node.output[-1] == "":
                node.output.pop()
        return self.nodes
