"""torch.compile(model, backend="onnxtrain", options={...}): each graph that TorchDynamo captures runs forward and
backward in onnxtrain (its export, autodiff, passes and memory optimizer, gradients back through the autograd
bridge); graph breaks leave the parts between graphs to PyTorch. `options` are onnxtrain.Options' fields
(fallback="torch" lets a graph onnxtrain cannot run run in PyTorch, reported once by name). The backend is
registered by the package's `torch_dynamo_backends` entry point.

Dynamic sizes: a graph compiled for symbolic sizes (torch.compile(..., dynamic=True), torch._dynamo.mark_dynamic,
or PyTorch's automatic dynamic shapes after a size changed) takes each size symbol as an int argument beside the
tensors; the wrapper reads those from the tensors' shapes instead, so one export serves every size."""

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


class _Graph(torch.nn.Module):
    """A captured graph whose size arguments come from its tensor arguments' shapes: it takes the tensors only.
    Its `dynamic_dims` tell onnxtrain.Module which dims vary: those TorchDynamo made symbolic (parameters and
    sizes it specialized on are exported as constants)."""

    def __init__(self, gm):
        super().__init__()
        self.gm = gm
        examples = [n.meta.get("example_value") for n in gm.graph.nodes if n.op == "placeholder"]
        self.sources = _size_sources(examples)
        self.tensor_positions = [i for i, s in enumerate(self.sources) if s is None]
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


def backend(gm, example_inputs, options=None):
    """The torch.compile backend: `gm` and its example inputs from TorchDynamo; returns the callable it runs."""
    options = Options(**(options or {}))
    functions = [n for n in gm.graph.nodes if getattr(n.target, "__name__", "") == "autograd_function_apply"]
    if functions and options.fallback != "torch":
        raise C.UnsupportedError(
            "onnxtrain: a custom torch.autograd.Function in a torch.compile graph (TorchDynamo traced it into "
            f"{functions[0].name}): wrap the model in onnxtrain.Module instead, which runs such Functions in the "
            "graph, or pass options={'fallback': 'torch'}")
    module = Module(_Graph(gm), options)
    positions = module.module.tensor_positions

    @torch.compiler.disable  # onnxtrain exports the graph at its first call: TorchDynamo must not capture that
    def run(*args):
        return module(*(args[i] for i in positions))

    run.onnxtrain_module = module  # for inspection: memory_report, export_count
    return run
