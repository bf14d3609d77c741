"""Flattening of a call's inputs and outputs: nested tuples, lists and dicts of tensors and plain values.

A schema is the structure with every tensor replaced by a placeholder; two calls with the same schema (and the
same dtypes, ranks and requires-grad flags) share one exported graph whatever their sizes.
"""

import torch


class UnsupportedType(TypeError):
    """An input or output of a type a schema cannot hold."""


class TensorSlot:
    """Where a tensor stands in a structure, with what the graph depends on (not its sizes)."""

    def __init__(self, index, dtype, ndim, requires_grad):
        self.index, self.dtype, self.ndim, self.requires_grad = index, dtype, ndim, requires_grad

    def key(self):
        return ("tensor", str(self.dtype), self.ndim, self.requires_grad)


def flatten(obj, name, tensors, names, role="input"):
    """Appends obj's tensors (and their names) in order; returns obj's schema. `role`: what obj is, for the error
    an unsupported type raises ("input" or "output")."""
    if isinstance(obj, torch.Tensor):
        tensors.append(obj)
        names.append(name)
        return TensorSlot(len(tensors) - 1, obj.dtype, obj.dim(), obj.requires_grad)
    if isinstance(obj, (tuple, list)):
        return (type(obj), [flatten(v, f"{name}_{i}", tensors, names, role) for i, v in enumerate(obj)])
    if isinstance(obj, dict):  # dict subclasses (OrderedDict, transformers' ModelOutput) keep their class
        return (type(obj), {k: flatten(v, f"{name}_{k}", tensors, names, role) for k, v in obj.items()})
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return ("const", obj)
    hint = ""
    if role == "output" and type(obj).__name__.endswith("Cache"):
        hint = " (a transformers model returns its key-value cache unless its config says use_cache=False)"
    raise UnsupportedType(f"onnxtrain: {role}s of type {type(obj).__name__} ({name}) are not supported; "
                    f"use tensors, numbers, strings, None, or tuples, lists and dicts of them{hint}")


def key(schema):
    """A hashable key: equal for calls that can share one exported graph."""
    if isinstance(schema, TensorSlot):
        return schema.key()
    kind, inner = schema
    if kind == "const":
        return ("const", inner)
    if isinstance(inner, dict):
        return (kind.__qualname__, tuple((k, key(v)) for k, v in inner.items()))
    return (kind.__name__, tuple(key(v) for v in inner))


def unflatten(schema, tensors):
    if isinstance(schema, TensorSlot):
        return tensors[schema.index]
    kind, inner = schema
    if kind == "const":
        return inner
    if isinstance(inner, dict):
        return kind(**{k: unflatten(v, tensors) for k, v in inner.items()})
    return kind(unflatten(v, tensors) for v in inner)
