"""A module's fingerprint: everything its captured graph depends on but the values of its parameters and of the
buffers the graph reads as inputs, as strings to hash (the capture cache's key, capture_cache).

- the code: the versions of the libraries that capture and of the packages the module's classes come from; the
  size and modification time of every loaded source file outside the Python installation (the project's own code,
  editable installs) and of onnxtrain's own files; the contents of the main script where a class of the module is
  defined there;
- each submodule's class, mode and attributes (walked: numbers, strings, containers, configs, functions by their
  code and closures, tensors by their contents), hooks included;
- the names, shapes, dtypes and requires-grad flags of the parameters and buffers, which of them are tied, and the
  contents of the buffers the graph holds as constants (those not in the state dict).

A module whose state cannot be read this way raises Unfingerprintable: it is captured without the cache."""

import hashlib
import importlib.metadata
import logging
import marshal
import os
import sys
import sysconfig
import threading
import types
import weakref

import torch

_MAX_ITEMS = 200_000  # a walk longer than this gives up: the module holds more than a graph depends on
# Module attributes walked otherwise (parameters, buffers, submodules) or that do not change the graph
_SKIPPED = {"_parameters", "_buffers", "_modules", "_non_persistent_buffers_set", "_state_dict_hooks",
            "_state_dict_pre_hooks", "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks", "training",
            "_is_full_backward_hook", "_compiled_call_impl"}


# Object attributes that differ from one process to the next without changing a graph: transformers'
# GenerationConfig keeps hash() of itself (randomized per process for its strings)
_VOLATILE = {"_original_object_hash"}


class Unfingerprintable(Exception):
    pass


# Objects whose state does not change a graph: named by their type alone
_OPAQUE = (logging.Logger, logging.Handler, type(threading.Lock()), type(threading.RLock()), weakref.ref)


def _installation_dirs():
    paths = sysconfig.get_paths()
    return tuple({os.path.realpath(paths[k]) + os.sep for k in ("stdlib", "platstdlib", "purelib", "platlib")})


def _stat(path):
    try:
        st = os.stat(path)
    except OSError:
        return f"{path} absent"
    return f"{path} {st.st_size} {st.st_mtime_ns}"


def _sha256_of_file(path):
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError as e:
        raise Unfingerprintable(f"its script {path} cannot be read ({e.strerror})") from e


def _version(top):
    try:
        return importlib.metadata.version(top)
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return str(getattr(sys.modules.get(top), "__version__", "?"))


def _code_parts(classes):
    """The versions and files the code of `classes` (and onnxtrain's, the exporters') is read from."""
    parts = [sys.version]
    tops = {"torch", "onnx", "onnxscript", "onnx_ir", "onnxtrain"}
    for cls in classes:
        module = cls.__module__ or ""
        if module == "__main__":
            main = sys.modules.get("__main__")
            path = getattr(main, "__file__", None)
            if path is None:
                raise Unfingerprintable(f"{cls.__qualname__} is defined in an interactive session (no file)")
            parts.append(f"__main__ {_sha256_of_file(path)}")
        elif module not in ("builtins",):
            tops.add(module.partition(".")[0])
    parts += [f"{top} {_version(top)}" for top in sorted(tops)]
    outside = _installation_dirs()
    files = set()
    for name, m in list(sys.modules.items()):
        path = getattr(m, "__file__", None)
        if name == "__main__" or not path:
            continue
        real = os.path.realpath(path)
        if not real.startswith(outside) or name.partition(".")[0] == "onnxtrain":
            files.add(real)
    parts += [_stat(p) for p in sorted(files)]
    return parts


class _Walk:
    """Writes a description of objects into `out`, each object once (later visits by reference)."""

    def __init__(self):
        self.out = []
        self.seen = {}  # id -> (index, the object itself: kept alive while walking, so that an id stays unique)
        self.classes = set()

    def emit(self, s):
        self.out.append(s)
        if len(self.out) > _MAX_ITEMS:
            raise Unfingerprintable(f"its attributes hold more than {_MAX_ITEMS} objects")

    def value(self, v):
        if v is None or isinstance(v, (bool, int, float, complex, str, bytes, torch.dtype, torch.device,
                                       torch.Size, range, slice, type(Ellipsis))):
            self.emit(f"{type(v).__name__}:{v!r}")
            return
        if isinstance(v, type):
            self.emit(f"class:{v.__module__}.{v.__qualname__}")
            self.classes.add(v)
            return
        if id(v) in self.seen:
            self.emit(f"ref:{self.seen[id(v)][0]}")
            return
        self.seen[id(v)] = (len(self.seen), v)
        if isinstance(v, torch.Tensor):
            self.tensor(v)
        elif isinstance(v, (list, tuple, set, frozenset)):
            items = sorted(v, key=repr) if isinstance(v, (set, frozenset)) else v
            self.emit(f"{type(v).__name__}[{len(items)}")
            for x in items:
                self.value(x)
        elif isinstance(v, dict):
            self.emit(f"{type(v).__name__}{{{len(v)}")
            for k, x in v.items():
                self.value(k)
                self.value(x)
        elif isinstance(v, types.MethodType):
            self.emit("method")
            self.value(v.__func__)
            self.value(v.__self__ if not isinstance(v.__self__, torch.nn.Module) else type(v.__self__))
        elif isinstance(v, types.FunctionType):
            self.function(v)
        elif isinstance(v, (types.BuiltinFunctionType, types.ModuleType)):
            self.emit(f"{type(v).__name__}:{getattr(v, '__module__', '')}.{v.__name__}")
        elif isinstance(v, torch.nn.Module):
            self.module(v)
        elif isinstance(v, _OPAQUE):
            self.emit(f"opaque:{type(v).__qualname__}")
        elif hasattr(v, "__dict__") or hasattr(type(v), "__slots__"):
            self.object(v)
        else:
            raise Unfingerprintable(f"an attribute of type {type(v).__qualname__} cannot be read")

    def tensor(self, t):
        self.emit(f"tensor:{t.dtype}:{tuple(t.shape)}:{t.requires_grad}")
        if t.device.type == "meta" or t.is_sparse:
            return
        data = t.detach().cpu().contiguous().reshape(-1).view(torch.uint8)
        self.emit(hashlib.sha256(data.numpy().tobytes()).hexdigest())

    def function(self, f):
        self.emit(f"function:{f.__module__}.{f.__qualname__}")
        self.emit(hashlib.sha256(marshal.dumps(f.__code__)).hexdigest())
        self.value(f.__defaults__)
        self.value(f.__kwdefaults__)
        for cell in f.__closure__ or ():
            try:
                self.value(cell.cell_contents)
            except ValueError:  # (an empty cell)
                self.emit("empty cell")

    def object(self, v):
        cls = type(v)
        self.emit(f"object:{cls.__module__}.{cls.__qualname__}")
        self.classes.add(cls)
        state = {k: x for k, x in getattr(v, "__dict__", {}).items() if k not in _VOLATILE}
        for klass in cls.__mro__:
            for slot in getattr(klass, "__slots__", ()):
                if slot not in ("__dict__", "__weakref__") and hasattr(v, slot):
                    state[slot] = getattr(v, slot)
        self.value(state)

    def module(self, m):
        cls = type(m)
        self.emit(f"module:{cls.__module__}.{cls.__qualname__}:{m.training}")
        self.classes.add(cls)
        if isinstance(m, torch.fx.GraphModule):  # its code says what it computes (its graph object is large)
            self.emit(f"fx:{m.code}")
            self.value({k: x for k, x in m.__dict__.items() if isinstance(x, torch.Tensor)})
        else:
            self.value({k: x for k, x in m.__dict__.items() if k not in _SKIPPED})
        for name, b in m._buffers.items():  # the state dict's buffers are inputs; the others, constants
            self.emit(f"buffer:{name}")
            if b is None or name not in m._non_persistent_buffers_set:
                self.emit("none" if b is None else f"tensor:{b.dtype}:{tuple(b.shape)}")
            else:
                self.value(b)
        for name, p in m._parameters.items():
            self.emit(f"parameter:{name}:" + ("none" if p is None else f"{p.dtype}:{tuple(p.shape)}:{p.requires_grad}"))
        for name, sub in m._modules.items():
            self.emit(f"submodule:{name}")
            self.value(sub)


def of_module(module):
    """The fingerprint of `module`, as strings."""
    walk = _Walk()
    try:
        walk.value(module)
    except RecursionError as e:
        raise Unfingerprintable("its attributes nest too deeply") from e
    ties = {}
    for name, p in module.named_parameters(remove_duplicate=False):
        ties.setdefault(id(p), []).append(name)
    walk.out += [f"tied:{names}" for names in ties.values() if len(names) > 1]
    classes = {k for cls in walk.classes for k in cls.__mro__ if k is not object}
    return _code_parts(classes) + walk.out
