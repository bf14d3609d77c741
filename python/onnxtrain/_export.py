"""Export of a module's call to an ONNX graph with PyTorch's TorchScript-based exporter (TRAINING or EVAL mode):
every input dim dynamic and named `<input>_dim<i>`, parameters and buffers as graph inputs (no weights in the
graph), training BatchNorm's updated statistics as extra outputs."""

import collections
import contextlib
import dataclasses
import io
import threading
import warnings

import onnx
import torch
from onnx import helper

from onnxtrain import _onnxtrain as C
from onnxtrain import _symbolics
from onnxtrain._schema import flatten, unflatten

_symbolics.register()

OPSET = 18


@dataclasses.dataclass
class Exported:
    model: onnx.ModelProto
    input_names: list     # the call's tensors, in order
    state_names: list     # parameters and buffers the graph reads, in graph-input order
    output_names: list    # the module's outputs, in order
    out_schema: object    # the structure of the module's outputs
    buffer_updates: dict  # graph output -> buffer it overwrites after a training call


class _Flat(torch.nn.Module):
    """The module called on flat tensors, returning flat tensors."""

    def __init__(self, module, schema):
        super().__init__()
        self.module = module
        self.schema = schema
        self.out_schema = None

    def state_dict(self, *, destination=None, prefix="", keep_vars=False):
        """What the tracer reads the parameters and buffers through (keep_vars: the tensors themselves): those the
        module holds now, under module.<name>, without the state-dict hooks of the modules inside (FSDP2's would
        swap the unsharded parameters of the running forward for sharded ones)."""
        held = collections.OrderedDict() if destination is None else destination
        for path, m in self.module.named_modules(prefix=prefix + "module"):
            persistent = [(n, b) for n, b in m._buffers.items() if n not in m._non_persistent_buffers_set]
            for name, t in [*m._parameters.items(), *persistent]:
                if t is not None:
                    held[f"{path}.{name}"] = t if keep_vars else t.detach()
        return held

    def forward(self, *flat):
        args, kwargs = unflatten(self.schema, list(flat))
        outs, names = [], []
        self.out_schema = flatten(self.module(*args, **kwargs), "output", outs, names)
        self.custom_functions = custom_functions(outs)
        return tuple(outs)


def custom_functions(outputs):
    """Names of the custom torch.autograd.Functions the outputs' autograd graph went through."""
    seen, found, todo = set(), [], [t.grad_fn for t in outputs if t.grad_fn is not None]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        cls = getattr(node, "_forward_cls", None)
        if cls is not None and cls.__name__ not in found:
            found.append(cls.__name__)
        todo.extend(n for n, _ in node.next_functions)
    return found


def fix_scaled_dot_product_attention_casts(model):
    """PyTorch's TorchScript translation of scaled_dot_product_attention casts the scale to the query's c10
    ScalarType number rather than its ONNX type: for a bfloat16 query (autocast) that is 15, ONNX's complex128.
    onnxtrain holds no complex types, so a Cast to 15 can only be that one: it becomes a Cast to bfloat16 (16)."""
    for node in model.graph.node:
        if node.op_type == "Cast":
            for a in node.attribute:
                if a.name == "to" and a.i == onnx.TensorProto.COMPLEX128:
                    a.i = onnx.TensorProto.BFLOAT16


# PyTorch's exporter, fork_rng, redirect_stdout and catch_warnings all change process-wide state: one export at
# a time (modules built in two threads at once otherwise fail inside the exporter).
_EXPORT_LOCK = threading.Lock()


def export(module, schema, tensors, names, training, dynamic_dims=None):
    """`dynamic_dims`: per tensor, the dims that vary (the others are exported as the sizes given); every dim of
    every tensor when None."""
    flat = _Flat(module, schema)
    saved = {n: b.detach().clone() for n, b in module.named_buffers()}  # tracing must not move BatchNorm statistics
    f = io.BytesIO()
    if dynamic_dims is None:
        dynamic_dims = [range(t.dim()) for t in tensors]
    axes = {n: {i: f"{n}_dim{i}" for i in dims} for n, dims in zip(names, dynamic_dims) if dims}
    mode = torch.onnx.TrainingMode.TRAINING if training else torch.onnx.TrainingMode.EVAL
    try:  # tracing runs the module once: it must not draw from PyTorch's generator either
        with (_EXPORT_LOCK, torch.random.fork_rng(), contextlib.redirect_stdout(io.StringIO()),
              warnings.catch_warnings()):
            warnings.simplefilter("ignore")
            # Traced on the inputs alone: their history (another graph's output, say) is not the module's.
            leaves = tuple(t.detach().requires_grad_(t.requires_grad) for t in tensors)
            torch.onnx.export(flat, leaves, f, input_names=names, dynamic_axes=axes, dynamo=False,
                              export_params=False, training=mode, do_constant_folding=False, opset_version=OPSET)
    finally:
        with torch.no_grad():
            for n, b in module.named_buffers():
                b.copy_(saved[n])
    if flat.custom_functions:
        raise C.UnsupportedError(
            f"custom torch.autograd.Function {', '.join(flat.custom_functions)}: onnxtrain differentiates the "
            "exported graph itself and would ignore its backward; run it outside the wrapped module or use fallback")
    model = onnx.load_from_string(f.getvalue())
    fix_scaled_dot_product_attention_casts(model)
    # Parameters and buffers arrive as inputs named "module.<name>"; strip the wrapper's prefix.
    rename = {i.name: i.name[len("module."):] for i in model.graph.input if i.name.startswith("module.")}
    for v in list(model.graph.input) + list(model.graph.output) + list(model.graph.value_info):
        v.name = rename.get(v.name, v.name)
    for node in model.graph.node:
        node.input[:] = [rename.get(x, x) for x in node.input]
        node.output[:] = [rename.get(x, x) for x in node.output]
    state = [i.name for i in model.graph.input if i.name not in names]
    buffers = {n for n, _ in module.named_buffers()}
    updates = {}
    for node in model.graph.node:
        training_bn = node.op_type == "BatchNormalization" and any(
            a.name == "training_mode" and a.i == 1 for a in node.attribute)
        if not training_bn or len(node.input) < 5 or node.input[3] not in buffers:
            continue
        # PyTorch updates running_var with the unbiased batch variance (an onnxtrain extension attribute).
        node.attribute.append(helper.make_attribute("unbiased_running_var", 1))
        while len(node.output) < 3:
            node.output.append("")
        for k, buffer in ((1, node.input[3]), (2, node.input[4])):
            out = node.output[k] or f"{buffer}.updated"
            node.output[k] = out
            model.graph.output.append(helper.make_tensor_value_info(out, onnx.TensorProto.UNDEFINED, None))
            updates[out] = buffer
    outputs = [o.name for o in model.graph.output if o.name not in updates]
    return Exported(model, list(names), state, outputs, flat.out_schema, updates)
