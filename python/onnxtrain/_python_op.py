"""The Python side of com.onnxtrain.PythonOp (src/ops/python_op.cpp): a custom torch.autograd.Function called from
the graph. Forward runs the Function's own apply on copies of its inputs, with autograd on where backward will want
it (the context: PyTorch's graph of the call, kept under a handle until the graph's context tensor goes); backward
asks PyTorch for the inputs' gradients through that graph, which runs the Function's own backward."""

import itertools

import torch

from onnxtrain import _onnxtrain as C
from onnxtrain._capture import custom_functions

_kept = {}  # handle -> (the call's inputs, its results)
_handles = itertools.count(1)


def _forward(key, inputs, outputs, keep):
    cls, arguments = custom_functions.resolve(key)
    xs = [torch.from_dlpack(t) for t in inputs]
    if keep:  # (copies: what the Function saves must outlive onnxtrain's buffers)
        xs = [x.detach().clone().requires_grad_(x.is_floating_point()) for x in xs]
        with torch.enable_grad():
            results = custom_functions.as_list(custom_functions.apply_original(cls, *arguments(xs)))
    else:
        with torch.no_grad():
            results = custom_functions.as_list(custom_functions.apply_original(cls, *arguments(xs)))
    for out, r in zip(outputs, results, strict=True):
        if out is not None:
            torch.from_dlpack(out).copy_(r)
    if not keep:
        return 0
    handle = next(_handles)
    _kept[handle] = (xs, results)
    return handle


def _backward(handle, output_grads, input_grads):
    xs, results = _kept[handle]
    pairs = [(r, torch.zeros_like(r) if g is None else torch.from_dlpack(g))
             for r, g in zip(results, output_grads, strict=True) if r.requires_grad]
    wanted = [x for x in xs if x.requires_grad]
    grads = iter(torch.autograd.grad([r for r, _ in pairs], wanted, [g for _, g in pairs], allow_unused=True)
                 if pairs and wanted else [None] * len(wanted))
    for x, out in zip(xs, input_grads, strict=True):
        g = next(grads) if x.requires_grad else None
        if out is not None:
            target = torch.from_dlpack(out)
            target.zero_() if g is None else target.copy_(g)


def _release(handle):
    _kept.pop(handle, None)


C.set_python_op_calls(_forward, _backward, _release)
