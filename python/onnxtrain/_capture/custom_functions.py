"""Custom torch.autograd.Functions in a captured graph: while a module is captured, each call of a Function of the
user's (not PyTorch's own) becomes one opaque op, onnxtrain::python_op(tensors, key), which the direct capture
translates into com.onnxtrain.PythonOp; at run time the Function's own forward and backward run in PyTorch, called
from the graph at their place (onnxtrain._python_op).

`key` names the Function by its module and qualified name (so that another process, or a capture cache entry,
finds it again) and holds its non-tensor arguments (JSON: numbers, strings, booleans, None and lists of them)."""

import contextlib
import importlib
import json
import sys
import threading

import torch

from onnxtrain import _onnxtrain as C

DOMAIN = "com.onnxtrain"
_ORIGINAL_APPLY = torch.autograd.Function.apply  # (bound to Function: its __func__ is called with the class)
_OWN_APPLY = vars(torch.autograd.Function).get("apply")  # the descriptor to put back (None: Function inherits it)
_state = threading.local()
_returns_tuple = {}  # key -> whether the Function returns a tuple (found by the fake run, which PyTorch may cache)


class Unsupported(Exception):
    """A Function call the graph cannot hold (its arguments, its class's name): said by the capture."""


def pytorchs_own(cls):
    """Whether a Function class is PyTorch's own (not one of the user's)."""
    return cls.__module__.split(".")[0] == "torch"


def _constant(v):
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple)):
        return [_constant(x) for x in v]
    raise Unsupported(f"an argument of type {type(v).__name__}")


def key_of(cls, args):
    """The key of a call of `cls` on `args`, and the tensors among them (in order)."""
    if "<locals>" in cls.__qualname__:
        raise Unsupported(f"{cls.__qualname__} is defined inside a function: define it at module level")
    tensors, spec = [], []
    for a in args:
        if isinstance(a, torch.Tensor):
            spec.append({"tensor": len(tensors)})
            tensors.append(a)
        else:
            spec.append({"value": _constant(a)})
    return json.dumps({"function": f"{cls.__module__}:{cls.__qualname__}", "args": spec}), tensors


def resolve(key):
    """The Function class a key names and a function of the call's tensors giving its arguments."""
    k = json.loads(key)
    module, qualname = k["function"].split(":")
    target = sys.modules.get(module) or importlib.import_module(module)
    for part in qualname.split("."):
        target = getattr(target, part)
    spec = k["args"]
    return target, lambda tensors: [tensors[a["tensor"]] if "tensor" in a else a["value"] for a in spec]


def apply_original(cls, *args):
    """The Function's own apply (forward, and the autograd node for its backward)."""
    return _ORIGINAL_APPLY.__func__(cls, *args)


def as_list(result):
    """A Function's result as a list of its tensors."""
    return list(result) if isinstance(result, (tuple, list)) else [result]


@torch.library.custom_op("onnxtrain::python_op", mutates_args=())
def python_op(tensors: list[torch.Tensor], key: str) -> list[torch.Tensor]:
    cls, arguments = resolve(key)
    with torch.no_grad():
        return [r.clone() for r in as_list(apply_original(cls, *arguments(tensors)))]


@python_op.register_fake
def _(tensors, key):
    cls, arguments = resolve(key)
    with torch.no_grad():
        result = apply_original(cls, *arguments(tensors))
    _returns_tuple[key] = isinstance(result, (tuple, list))
    results = as_list(result)
    if not all(isinstance(r, torch.Tensor) for r in results):
        raise C.UnsupportedError(f"custom torch.autograd.Function {cls.__qualname__}: returns something that is not "
                                 "a tensor")
    return [r.clone() for r in results]


def _captured_apply(cls, *args, **kwargs):
    if kwargs or pytorchs_own(cls) or getattr(_state, "inside", False):
        return _ORIGINAL_APPLY.__func__(cls, *args, **kwargs)
    try:
        key, tensors = key_of(cls, args)
    except Unsupported as e:
        raise C.UnsupportedError(f"custom torch.autograd.Function {cls.__qualname__}: {e}") from None
    _state.inside = True  # (the fake implementation runs the Function itself)
    try:
        outs = python_op(tensors, key)
    finally:
        _state.inside = False
    return tuple(outs) if _returns_tuple[key] else outs[0]


@contextlib.contextmanager
def captured():
    """While it lasts, the user's Functions' calls become python_op."""
    torch.autograd.Function.apply = classmethod(_captured_apply)
    try:
        yield
    finally:
        if _OWN_APPLY is None:
            del torch.autograd.Function.apply
        else:
            torch.autograd.Function.apply = _OWN_APPLY
