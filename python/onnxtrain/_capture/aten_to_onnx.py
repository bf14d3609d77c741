"""The direct capture: torch.export's training-mode ATen graph translated straight into an ONNX graph as onnxtrain reads
it, each ATen op by its translation in aten_math, aten_activations, aten_reductions, aten_normalization,
aten_shapes or aten_convolutions, without PyTorch's ONNX exporter
(whose decomposition traces the whole module a second time: 9 of the 21 s a 30-layer Llama took to capture; its
translation and onnxscript's optimizer 6 more). onnxtrain's own passes fold, deduplicate and fuse what the graph
holds.

The graph is as the exporter's: parameters and buffers are inputs named module.<name>, lifted constants
initializers, the call's tensors inputs named as given with their dynamic dims named `<input>_dim<i>`. Autocast is
applied as the ATen graph records it, in each value's dtype: a translation computes in its output's dtype, its
floating inputs cast to it (what autocast's casts and PyTorch's type promotion do).

A graph holding anything not translated here (an op without a translation, a buffer the call updates, a data
type ONNX lacks) raises Untranslatable, and the exporter captures it instead."""

import json
import operator

import onnx
import torch
from onnx import helper

from onnxtrain import _onnxtrain as C
from onnxtrain._capture import (aten_activations, aten_convolutions, aten_math, aten_normalization, aten_reductions,
                                aten_shapes, custom_functions, view_writes)
from onnxtrain._capture.aten_values import Untranslatable, onnx_dtype
from onnxtrain._capture.graph_builder import OPSET, GraphBuilder, Value

_SKIPPED = {torch.ops.aten._assert_tensor_metadata.default, torch.ops.aten._assert_scalar.default,
            torch.ops.aten.sym_constrain_range_for_size.default, torch.ops.aten.sym_constrain_range.default}
TABLE = {**aten_math.TABLE, **aten_activations.TABLE, **aten_reductions.TABLE, **aten_normalization.TABLE,
         **aten_shapes.TABLE, **aten_convolutions.TABLE}
_INLINED = ("wrap_with_set_grad_enabled", "wrap_with_autocast")  # their subgraph, as the exporter inlines them


def _static(shape):
    """A shape as Values hold it: ints, None where symbolic."""
    return tuple(d if isinstance(d, int) else None for d in shape)


def _value_of(name, val):
    """A Value named `name` for an FX meta value (a tensor)."""
    return Value(name, onnx_dtype(val.dtype), _static(val.shape))


def _tensor_proto(name, t):
    t = t.detach().cpu().contiguous()
    proto = onnx.TensorProto(name=name, data_type=int(onnx_dtype(t.dtype)), dims=list(t.shape))
    proto.raw_data = t.view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
    return proto


def _aliases(target):
    """Whether an FX call's result may share memory with an input (a view, a getitem of a split)."""
    if not isinstance(target, torch._ops.OpOverload):
        return target is operator.getitem
    return any(r.alias_info is not None for r in target._schema.returns)


def _functional(target):
    """The functional overload of an in-place ATen op that updates its first argument alone (relu_ -> relu), or
    None."""
    args = target._schema.arguments
    writes = [a.alias_info is not None and a.alias_info.is_write for a in args]
    name = target._schema.name.split("::")[-1]
    if not writes or not writes[0] or any(writes[1:]) or not name.endswith("_"):
        return None
    return getattr(getattr(torch.ops.aten, name[:-1], None), target._overloadname, None)


class _Walk:
    """One graph's translation: FX nodes to Values (tensors), tuples of Values, or ints (sizes known here)."""

    def __init__(self, builder, counters=()):
        self.b = builder
        self.env = {}
        self.counters = set(counters)  # placeholders of BatchNorm's num_batches_tracked buffers

    def arg(self, a):
        if isinstance(a, torch.fx.Node):
            return self.env[a]
        if isinstance(a, (list, tuple)):
            return type(a)(self.arg(x) for x in a)
        return a

    def run(self, graph, inputs):
        """Translates `graph` (its placeholders bound to `inputs`, in order); its outputs."""
        placeholders = [n for n in graph.nodes if n.op == "placeholder"]
        for n, v in zip(placeholders, inputs, strict=True):
            self.env[n] = v
        self.position = {n: i for i, n in enumerate(graph.nodes)}
        for node in graph.nodes:
            if node.op == "call_function":
                self.env[node] = self.call(node)
            elif node.op == "get_attr":
                self.env[node] = getattr(graph.owning_module, node.target)
            elif node.op == "output":
                return self.arg(node.args[0])
        raise Untranslatable("a graph without an output")

    def call(self, node):
        target = node.target
        if target in _SKIPPED:
            return None
        name = getattr(target, "__name__", str(target))
        if name in _INLINED:
            sub = self.arg(node.args[1 if name == "wrap_with_set_grad_enabled" else 4])
            args = self.arg(node.args[2 if name == "wrap_with_set_grad_enabled" else 5:])
            return tuple(_Walk(self.b).run(sub.graph, args)) if not isinstance(sub, Value) else None
        if target is operator.getitem:
            return self.arg(node.args[0])[node.args[1]]
        if target is torch.ops.onnxtrain.python_op.default:
            return self.python_op(node)
        updated = None
        if node.args and node.args[0] in self.counters and len(node.args[0].users) == 1 and not node.users:
            return None  # (a BatchNorm counting its batch, read by nothing: the runner counts it, as it writes back
            # the running statistics)
        if view_writes.is_view_write(node, self.position):
            names, value = view_writes.write(self, node)
            for name in names:  # (its later readers read the written value)
                self.env[name] = _typed(value, name.meta.get("val"))
            return None
        if isinstance(target, torch._ops.OpOverload) and target._schema.is_mutable:
            target, updated = self.functional(node), view_writes.names(node.args[0])
        translation = TABLE.get(target)
        if translation is None:
            raise Untranslatable(f"no translation of {target}")
        self.b.hint = node.name
        out = translation(_Out(node.meta.get("val")), self.b, *self.arg(node.args), **self.arg(node.kwargs))
        for name in updated or ():  # (its later readers, by any of its names, read the updated value)
            self.env[name] = out
        return _typed(out, node.meta.get("val"))

    def python_op(self, node):
        """A custom autograd Function's call (custom_functions): com.onnxtrain.PythonOp, each result shaped as one of
        its tensors (the graph knows its shapes before it runs)."""
        tensors, key = node.args[0], node.args[1]
        vals, results = [t.meta["val"] for t in tensors], node.meta["val"]
        like = []
        for r in results:
            same = [i for i, v in enumerate(vals) if [str(d) for d in v.shape] == [str(d) for d in r.shape]]
            if not same:
                raise C.UnsupportedError(
                    f"custom torch.autograd.Function {json.loads(key)['function']}: a result of shape "
                    f"{tuple(r.shape)} is shaped as none of its tensor arguments; onnxtrain runs such Functions "
                    "only where each result has the shape of an argument")
            like.append(same[0])
        outs = [Value(self.b.fresh(node.name), onnx_dtype(r.dtype), _static(r.shape)) for r in results]
        context = self.b.fresh(f"{node.name}_context")
        self.b.nodes.append(helper.make_node(
            "PythonOp", [self.arg(t).name for t in tensors], [o.name for o in outs] + [context],
            domain=custom_functions.DOMAIN, key=key, output_like=like,
            output_dtypes=[int(onnx_dtype(r.dtype)) for r in results]))
        return outs

    def functional(self, node):
        """The functional form of an in-place update (ReLU(inplace=True), x.floor_()) of an activation that nothing
        else sees: not a graph input, a parameter or a buffer, not a view, and without views taken of it before; or
        of such an activation's in-place update (scores.div_(d).masked_fill_(mask, v): each names the value)."""
        target, first = node.target, node.args[0] if node.args else None
        functional = _functional(target)
        names = view_writes.names(first)
        origin = names[-1]
        # (a getitem of an ATen op's results aliases what that op's do: topk's values are a value of their own)
        made_by = origin.args[0] if isinstance(origin, torch.fx.Node) and origin.target is operator.getitem else origin
        safe = (functional is not None and isinstance(made_by, torch.fx.Node) and made_by.op == "call_function"
                and (made_by is origin or isinstance(made_by.target, torch._ops.OpOverload))
                and not _aliases(made_by.target))
        if safe and not any(_aliases(u.target) and not view_writes.only_written(u) and u not in names
                            for name in names for u in name.users if self.position[u] < self.position[node]):
            return functional
        raise Untranslatable(f"{target} updates a value in place")


class _Out:
    """What a translation knows of the value it makes: dtype (ir.DataType), shape (ints, None where symbolic)."""

    def __init__(self, val):
        self.val = val
        tensor = isinstance(val, torch.Tensor)
        self.dtype = onnx_dtype(val.dtype) if tensor else None
        self.shape = _static(val.shape) if tensor else None
        self.rank = len(val.shape) if tensor else None


def _typed(out, val):
    """`out` with the dtypes and shapes of the FX value `val` recorded on its Values."""
    if isinstance(out, Value) and isinstance(val, torch.Tensor):
        out.dtype, out.shape = onnx_dtype(val.dtype), _static(val.shape)
    elif isinstance(out, (tuple, list)) and isinstance(val, (tuple, list)):
        for o, w in zip(out, val):
            _typed(o, w)
    return out


def _input_info(value, val, dims):
    """The graph input `value`, its symbolic dims named as `dims` names their symbols (one symbol, one name)."""
    shape = [d if isinstance(d, int) else dims[str(d.node.expr)] for d in val.shape]
    return helper.make_tensor_value_info(value.name, int(value.dtype), shape)


def translate(program, names):
    """The ONNX graph of `program` (a torch.export ExportedProgram of the flat module called on tensors named
    `names`), or Untranslatable."""
    from torch.export.graph_signature import InputKind, OutputKind

    sig = program.graph_signature
    b = GraphBuilder()
    placeholders = [n for n in program.graph.nodes if n.op == "placeholder"]
    infos, dims, bound, user, held, counters = [], {}, [], 0, {}, []
    for spec, node in zip(sig.input_specs, placeholders, strict=True):
        val = node.meta.get("val")
        if spec.kind == InputKind.BUFFER and spec.target.endswith("num_batches_tracked"):
            counters.append(node)
        if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER):
            tensor = program.state_dict.get(spec.target, program.constants.get(spec.target))
            key = spec.target if tensor is None else id(tensor)
            if key in held:  # a tied parameter: one input, under its first name
                bound.append(held[key])
                continue
            value = held[key] = _value_of(b.fresh(spec.target), val)
            infos.append((value, val))
            if any(not isinstance(d, int) for d in val.shape):
                raise Untranslatable(f"{spec.target} has a dim of symbolic size")
        elif spec.kind == InputKind.USER_INPUT:
            if not isinstance(val, torch.Tensor):
                raise Untranslatable("an input that is not a tensor")
            value = _value_of(b.fresh(names[user]), val)
            for i, d in enumerate(val.shape):
                if not isinstance(d, int):
                    dims.setdefault(str(d.node.expr), f"{names[user]}_dim{i}")
            user += 1
            infos.append((value, val))
        elif spec.kind in (InputKind.CONSTANT_TENSOR,):
            constant = program.constants[spec.target]
            value = _value_of(b.fresh(spec.target), constant)
            b.initializers.append(_tensor_proto(value.name, constant))
        else:
            raise Untranslatable(f"an input of kind {spec.kind.name}")
        bound.append(value)
    if any(s.kind != OutputKind.USER_OUTPUT for s in sig.output_specs):
        raise Untranslatable("the call updates a buffer or an input")
    outs = _Walk(b, counters).run(program.graph, bound)
    input_names = {v.name for v, _ in infos}
    taken = input_names | {t.name for t in b.initializers}
    outputs = []
    for out in outs:
        if not isinstance(out, Value):
            raise Untranslatable("an output that is not a tensor")
        name = out.name if out.name not in taken else b.op("Identity", out).name
        taken.add(name)
        outputs.append(helper.make_tensor_value_info(name, int(out.dtype), None))
    graph = helper.make_graph(b.finish([o.name for o in outputs]), "main_graph",
                              [_input_info(v, val, dims) for v, val in infos], outputs, initializer=b.initializers)
    opsets = [helper.make_opsetid("", OPSET)]
    if any(n.domain == custom_functions.DOMAIN for n in graph.node):
        opsets.append(helper.make_opsetid(custom_functions.DOMAIN, 1))
    return helper.make_model(graph, opset_imports=opsets, producer_name="onnxtrain")
