"""torch.compile(model, backend="onnxtrain", options={...}): each graph that TorchDynamo captures runs forward and
backward in onnxtrain (its export, autodiff, passes and memory optimizer, gradients back through the autograd
bridge); graph breaks leave the parts between graphs to PyTorch. `options` are onnxtrain.Options' fields
(fallback="torch" lets a graph onnxtrain cannot run run in PyTorch, reported once by name). The backend is
registered by the package's `torch_dynamo_backends` entry point.

Dynamic sizes: a graph compiled for symbolic sizes (torch.compile(..., dynamic=True), torch._dynamo.mark_dynamic,
or PyTorch's automatic dynamic shapes after a size changed) takes each size symbol as an int argument beside the
tensors; the wrapper reads those from the tensors' shapes instead, so one export serves every size. A Python float
it passes as a tensor for an object's float attribute (under dynamic=True) is a constant of the graph instead, a
graph a value."""

import copy
import hashlib

import torch

from onnxtrain import _onnxtrain as C
from onnxtrain.module import Module
from onnxtrain.options import Options


def _size_sources(examples):
    """For each argument of the graph that is a symbolic size (an int), the (argument, dim) of a tensor argument
    whose size it is, from the placeholders' example values; None for the other arguments."""
    sources = []
    for a in examples:
        if not isinstance(a, torch.SymInt):
            sources.append(None)
            continue
        found = [(j, d) for j, t in enumerate(examples) if isinstance(t, torch.Tensor)
                 for d, size in enumerate(t.shape) if isinstance(size, torch.SymInt) and size.node.expr == a.node.expr]
        if not found:
            raise NotImplementedError(f"onnxtrain: a graph takes the size {a.node.expr}, which no input tensor has")
        sources.append(found[0])
    return sources


def _function_of(fwd, bwd, non_differentiable):
    """A torch.autograd.Function of this module running TorchDynamo's subgraphs of one (its forward returns the
    outputs and the values its backward reads), named by their code: the same in every process that compiles the
    model, so that the capture's key (custom_functions) finds it again."""
    name = "_function_" + hashlib.sha1(f"{fwd.code}{bwd.code}{non_differentiable}".encode()).hexdigest()[:16]
    if name not in globals():
        def forward(ctx, *args):
            output, saved = torch.fx.Interpreter(fwd).run(*args)
            ctx.saved = tuple(saved)
            outs = output if isinstance(output, (tuple, list)) else (output,)
            ctx.mark_non_differentiable(*(o for i, o in enumerate(outs) if i in non_differentiable))
            return output

        def backward(ctx, *grads):
            return torch.fx.Interpreter(bwd).run(*grads, *ctx.saved)

        globals()[name] = type(name, (torch.autograd.Function,), {
            "forward": staticmethod(forward), "backward": staticmethod(backward), "__module__": __name__,
            "__qualname__": name})
    return name


def _apply(name, *args):
    """A call of the Function `name` (_function_of), looked up when the graph runs (where the capture intercepts
    Functions' calls)."""
    return globals()[name].apply(*args)


def _functions_as_calls(gm):
    """Each custom autograd Function TorchDynamo traced into the graph (autograd_function_apply, its forward and
    backward as subgraphs) made a call of a Function again, which onnxtrain.Module's capture holds as
    com.onnxtrain.PythonOp: its own backward runs in backward."""
    for node in list(gm.graph.nodes):
        if getattr(node.target, "__name__", "") != "autograd_function_apply":
            continue
        if node.kwargs.get("dirty_idx"):
            raise C.UnsupportedError(f"onnxtrain: a custom autograd Function that marks an input dirty ({node.name})")
        fwd, bwd = (getattr(gm, a.target) for a in node.args[:2])
        name = _function_of(fwd, bwd, list(node.kwargs.get("non_differentiable_idx", ())))
        with gm.graph.inserting_before(node):
            call = gm.graph.call_function(_apply, (name, *node.args[2:]))
        call.meta = dict(node.meta)
        node.replace_all_uses_with(call)
        gm.graph.erase_node(node)
    gm.recompile()


class _Graph(torch.nn.Module):
    """A captured graph whose size arguments come from its tensor arguments' shapes: it takes the tensors only
    (but those it does not read: `unread` positions).
    Its `dynamic_dims` tell onnxtrain.Module which dims vary: those TorchDynamo made symbolic (parameters and
    sizes it specialized on are exported as constants)."""

    def __init__(self, gm, unread=()):
        super().__init__()
        self.gm = gm
        examples = [n.meta.get("example_value") for n in gm.graph.nodes if n.op == "placeholder"]
        self.sources = _size_sources(examples)
        self.tensor_positions = [i for i, s in enumerate(self.sources) if s is None and i not in unread]
        self.dynamic_dims = [[d for d, size in enumerate(getattr(examples[i], "shape", ()))
                              if isinstance(size, torch.SymInt)] for i in self.tensor_positions]

    def forward(self, *tensors):
        args = [None] * len(self.sources)
        for i, t in zip(self.tensor_positions, tensors):
            args[i] = t
        for i, s in enumerate(self.sources):
            if s is not None:
                args[i] = args[s[0]].size(s[1])
        return self.gm(*args)


def _float_positions(gm):
    """The arguments that are an object's float attribute (as nn.RMSNorm's eps) TorchDynamo passes as a 0-d tensor
    read by .item() alone, under dynamic=True. (A float computed in the code, whose value may change every call,
    stays an argument.)"""
    from torch._dynamo.source import AttrSource

    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    return [i for i, n in enumerate(placeholders)
            if n.users and all(u.op == "call_method" and u.target == "item" for u in n.users)
            and getattr(n.meta.get("grapharg"), "pass_arg_as_tensor", False)
            and isinstance(n.meta["grapharg"].source, AttrSource)]


def _with_floats(gm, values):
    """A copy of `gm` whose float arguments (position -> value) are those constants: torch.export guards on a
    float it reads through .item() where an op branches on it (nn.RMSNorm's eps under autocast), and cannot
    capture it then. The arguments stay, read by nothing."""
    gm = copy.deepcopy(gm)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for i, value in values.items():
        for item in list(placeholders[i].users):
            for user in list(item.users):
                user.args = torch.fx.node.map_arg(user.args, lambda n, item=item: value if n is item else n)
                user.kwargs = torch.fx.node.map_arg(user.kwargs, lambda n, item=item: value if n is item else n)
            gm.graph.erase_node(item)
    gm.recompile()
    return gm


def backend(gm, example_inputs, options=None):
    """The torch.compile backend: `gm` and its example inputs from TorchDynamo; returns the callable it runs. Its
    float arguments (_float_positions) are taken as constants, a graph for each set of their values, as
    TorchDynamo compiles again for a float it specializes on."""
    options = Options(**(options or {}))
    _functions_as_calls(gm)
    floats = _float_positions(gm)
    modules = {}

    def module_for(args):
        values = tuple(float(args[i].item()) for i in floats)
        if values not in modules:
            graph = _Graph(_with_floats(gm, dict(zip(floats, values))) if floats else gm, set(floats))
            modules[values] = Module(graph, options)
            if run.onnxtrain_module is None:
                run.onnxtrain_module = modules[values]
        return modules[values]

    @torch.compiler.disable  # onnxtrain exports the graph at its first call: TorchDynamo must not capture that
    def run(*args):
        module = module_for(args)
        return module(*(args[i] for i in module.module.tensor_positions))

    # for inspection (memory_report, export_count): the graph's module, or with floats the first call's; and by
    # the floats' values, every module built
    run.onnxtrain_module, run.onnxtrain_modules = None, modules
    if not floats:
        module_for(())
    return run
