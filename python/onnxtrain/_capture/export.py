"""Export of a module's call to an ONNX graph (training or eval mode) through torch.export (export_program) or,
as a fallback, PyTorch's TorchScript-based exporter (export_torchscript): dynamic dims named `<input>_dim<i>`,
parameters and buffers as graph inputs named as the module names them (no weights in the graph)."""

import collections
import contextlib
import dataclasses
import functools
import io
import logging
import warnings

import onnx
import torch

from onnxtrain import _onnxtrain as C
from onnxtrain._capture import capture_lock, custom_functions, experts, export_program, export_torchscript
from onnxtrain._capture import capture_process as child
from onnxtrain._capture.input_schema import UnsupportedType, flatten, unflatten

OPSET = 18
EXPORTERS = ("auto", "torch.export", "torch.onnx", "torchscript")
logger = logging.getLogger("onnxtrain")


@dataclasses.dataclass
class Exported:
    model: onnx.ModelProto
    input_names: list     # the call's tensors, in order
    state_names: list     # parameters and buffers the graph reads, in graph-input order
    output_names: list    # the module's outputs, in order
    out_schema: object    # the structure of the module's outputs
    exporter: str         # "torch.export" or "torchscript": the one that made the graph


class _Flat(torch.nn.Module):
    """The module called on flat tensors, returning flat tensors."""

    def __init__(self, module, schema, record):
        super().__init__()
        self.module = module
        self.schema = schema
        # What the traced call saw: its outputs' structure, the custom autograd Functions it went through. A dict
        # the caller holds (torch.export restores the attributes of the module it traced; a held object keeps the
        # record).
        self.record = record

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
        try:
            self.record["out_schema"] = flatten(self.module(*args, **kwargs), "output", outs, names, "output")
        except UnsupportedType as e:  # (no other exporter would do better: not a reason to fall back)
            raise C.UnsupportedError(str(e)) from None
        self.record["custom_functions"] = _functions_called(outs)
        return tuple(outs)


def _functions_called(outputs):
    """Names of the custom torch.autograd.Functions the outputs' autograd graph went through (PyTorch's own, such
    as the autograd of the custom op that holds the user's Functions in a captured graph, aside)."""
    seen, found, todo = set(), [], [t.grad_fn for t in outputs if t.grad_fn is not None]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        cls = getattr(node, "_forward_cls", None)
        if cls is not None and not custom_functions.pytorchs_own(cls) and cls.__name__ not in found:
            found.append(cls.__name__)
        todo.extend(n for n, _ in node.next_functions)
    return found




@contextlib.contextmanager
def _quiet(names=("torch.onnx", "torch.export", "onnxscript", "onnx_ir")):
    """The exporters' own log lines (torchvision's missing ops, optimizer passes) held back while they run: what
    goes wrong reaches the user as an exception."""
    loggers = [logging.getLogger(n) for n in names]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def _capture(exporter, module, schema, tensors, names, training, dynamic_dims):
    """`exporter`'s graph of the module's call, and the flat module's record of it (outputs, custom functions)."""
    record = {}
    flat = _Flat(module, schema, record)
    saved = {n: b.detach().clone() for n, b in module.named_buffers()}  # tracing must not move BatchNorm statistics
    # nor change any submodule's mode (the TorchScript-based exporter sets one mode on all, then another on all)
    modes = [(m, m.training) for m in module.modules()]
    to_onnx = export_torchscript.to_onnx if exporter == "torchscript" else functools.partial(
        export_program.to_onnx, direct=exporter != "torch.onnx")
    try:  # tracing may run the module: it must not draw from PyTorch's generator either
        with (capture_lock.capturing(), torch.random.fork_rng(), contextlib.redirect_stdout(io.StringIO()),
              warnings.catch_warnings(), _quiet()):
            warnings.simplefilter("ignore")
            # Traced on the inputs alone: their history (another graph's output, say) is not the module's.
            leaves = tuple(t.detach().requires_grad_(t.requires_grad) for t in tensors)
            # (torch.export's graph holds the user's autograd Functions as calls of their own: com.onnxtrain.PythonOp)
            functions = custom_functions.captured() if exporter != "torchscript" else contextlib.nullcontext()
            with functions, experts.dense(module):
                model = to_onnx(flat, leaves, names, dynamic_dims, training, OPSET)
    finally:
        with torch.no_grad():
            for n, b in module.named_buffers():
                b.copy_(saved[n])
        for m, training in modes:
            m.training = training
    if record["custom_functions"]:
        raise C.UnsupportedError(
            f"custom torch.autograd.Function {', '.join(record['custom_functions'])}: PyTorch's TorchScript-based "
            "exporter, which captured this module, cannot hold it (onnxtrain runs such Functions in graphs "
            "torch.export captures)")
    return model, record


def export(module, schema, tensors, names, training, dynamic_dims=None, exporter="auto", capture_process=False):
    """`dynamic_dims`: per tensor, the dims that vary (the others are exported as the sizes given); every dim of
    every tensor when None. `exporter` "auto" captures through torch.export and falls back to the TorchScript-based
    exporter, with a warning naming why, where torch.export cannot capture the module. `capture_process`: in a
    forked child process where one may be (capture_process)."""
    if capture_process and child.usable():
        return child.run(export, module, schema, tensors, names, training, dynamic_dims, exporter)
    if dynamic_dims is None:
        dynamic_dims = [range(t.dim()) for t in tensors]
    used = "torchscript" if exporter == "torchscript" else "torch.export"
    try:
        model, record = _capture(exporter if exporter != "auto" else used, module, schema, tensors, names, training,
                                 dynamic_dims)
    except C.Error:
        raise
    except Exception as e:
        if exporter != "auto":
            raise
        reason = (str(e).strip().splitlines() or [""])[0][:300]
        logger.warning("onnxtrain: %s: torch.export cannot capture it (%s: %s); using PyTorch's TorchScript-based "
                       "exporter", type(module).__name__, type(e).__name__, reason)
        used = "torchscript"
        try:
            model, record = _capture(used, module, schema, tensors, names, training, dynamic_dims)
        except C.UnsupportedError as fallback:  # (what stopped torch.export may be the easier to change)
            raise C.UnsupportedError(f"{fallback} (torch.export's capture, tried first: {type(e).__name__}: "
                                     f"{reason})") from None
    # Parameters and buffers arrive as inputs named "module.<name>"; strip the wrapper's prefix.
    rename = {i.name: i.name[len("module."):] for i in model.graph.input if i.name.startswith("module.")}
    for v in list(model.graph.input) + list(model.graph.output) + list(model.graph.value_info):
        v.name = rename.get(v.name, v.name)
    for node in model.graph.node:
        node.input[:] = [rename.get(x, x) for x in node.input]
        node.output[:] = [rename.get(x, x) for x in node.output]
    state = [i.name for i in model.graph.input if i.name not in names]
    outputs = [o.name for o in model.graph.output]
    return Exported(model, list(names), state, outputs, record["out_schema"], used)
