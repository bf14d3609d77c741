"""A disk cache of captured graphs: a second run of the same script loads the graph its first run captured instead
of capturing it again (torch.export and the ONNX exporter: most of a large model's first step).

An entry is keyed by everything the captured graph depends on (fingerprint): the module's code, its state other
than parameter and buffer values, their names, shapes, dtypes and ties, the call's input schema and sizes, the
capture's options, and the versions of the libraries that capture. Entries are written atomically and carry a
checksum: an entry that does not check is captured again, never loaded. A folder that cannot be written warns once
and the module runs without the cache.

Where: ONNXTRAIN_CAPTURE_CACHE / Options.capture_cache, a folder, or "0" to disable it; by default
$XDG_CACHE_HOME/onnxtrain/captures (~/.cache/onnxtrain/captures). clear() empties it."""

import hashlib
import json
import logging
import os
import struct
import sys
import tempfile
import time

import onnx
import torch

from onnxtrain._capture import fingerprint
from onnxtrain._capture.export import Exported
from onnxtrain._capture.input_schema import TensorSlot

logger = logging.getLogger("onnxtrain")

FORMAT = 2
_MAGIC = b"ONNXTRAIN-CAPTURE\n"
_SUFFIX = ".capture"
# Oldest entries (by last use) go once the folder holds more than this.
MAX_BYTES = 1 << 30
_warned = set()  # folders that could not be written, warned of once


def default_folder():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "onnxtrain", "captures")


def folder_of(setting):
    """The cache folder an Options.capture_cache setting names: None when it disables the cache."""
    if str(setting).strip().lower() in ("0", "off", "false", "none"):
        return None
    return setting or default_folder()


def key(module, schema_key, tensors, training, dynamic_dims, exporter, opset, device_type="cpu"):
    """The key of the graph a capture of this call, on a device of `device_type`, would make, or None (with the reason
    logged) where the module's state cannot be fingerprinted."""
    try:
        parts = fingerprint.of_module(module)
    except fingerprint.Unfingerprintable as e:
        logger.info("onnxtrain: %s is captured without the capture cache: %s", type(module).__name__, e)
        return None
    call = {
        "format": FORMAT,
        "schema": repr(schema_key),
        "tensors": [(list(t.shape), str(t.dtype), t.requires_grad, t.is_contiguous()) for t in tensors],
        "training": training,
        "grad_enabled": torch.is_grad_enabled(),
        "device": device_type,  # (exporters decompose some ops per device, and autocast's casts differ)
        "autocast": (torch.is_autocast_enabled(device_type), str(torch.get_autocast_dtype(device_type))),
        "default_dtype": str(torch.get_default_dtype()),
        "dynamic_dims": None if dynamic_dims is None else [list(d) for d in dynamic_dims],
        "exporter": exporter,
        "opset": opset,
    }
    digest = hashlib.sha256()
    for part in (json.dumps(call, sort_keys=True), *parts):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()


# What crosses to disk: the Exported record, its output schema in JSON (classes named, resolved on load among the
# modules already imported: loading imports and runs nothing).
def _schema_to_json(s):
    if isinstance(s, TensorSlot):
        return {"tensor": [s.index, str(s.dtype).removeprefix("torch."), s.ndim, s.requires_grad]}
    kind, inner = s
    if kind == "const":
        if inner is not None and not isinstance(inner, (bool, int, float, str)):
            raise TypeError(f"a constant of type {type(inner).__name__}")
        return {"const": inner}
    cls = f"{kind.__module__}:{kind.__qualname__}"
    if isinstance(inner, dict):
        if not all(isinstance(k, str) for k in inner):
            raise TypeError("a dict with keys other than strings")
        return {"dict": cls, "items": [[k, _schema_to_json(v)] for k, v in inner.items()]}
    return {"seq": cls, "items": [_schema_to_json(v) for v in inner]}


def _resolve(name):
    module, _, qualname = name.partition(":")
    obj = sys.modules.get(module)
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    if not isinstance(obj, type):
        raise LookupError(f"class {name} is not loaded")
    return obj


def _schema_from_json(j):
    if "tensor" in j:
        index, dtype, ndim, requires_grad = j["tensor"]
        if not isinstance(getattr(torch, dtype, None), torch.dtype):
            raise LookupError(f"dtype {dtype}")
        return TensorSlot(index, getattr(torch, dtype), ndim, requires_grad)
    if "const" in j:
        return ("const", j["const"])
    if "dict" in j:
        return (_resolve(j["dict"]), {k: _schema_from_json(v) for k, v in j["items"]})
    return (_resolve(j["seq"]), [_schema_from_json(v) for v in j["items"]])


def _path(folder, k):
    return os.path.join(folder, k + _SUFFIX)


def load(folder, k):
    """The Exported record stored under key `k`, or None: absent, unreadable, corrupt (its checksum or contents do
    not check: removed, with a warning) or naming a class not loaded."""
    path = _path(folder, k)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    try:
        if not data.startswith(_MAGIC):
            raise ValueError("not a capture cache entry")
        digest, body = data[len(_MAGIC):len(_MAGIC) + 64], data[len(_MAGIC) + 65:]
        if hashlib.sha256(body).hexdigest().encode() != digest:
            raise ValueError("its checksum does not match its contents")
        (header_size,) = struct.unpack("<Q", body[:8])
        header = json.loads(body[8:8 + header_size])
        if header.get("key") != k or header.get("format") != FORMAT:
            raise ValueError("it was written under another key")
        model = onnx.ModelProto.FromString(body[8 + header_size:])
        exported = Exported(model, header["input_names"], header["state_names"], header["output_names"],
                            _schema_from_json(header["out_schema"]), header["exporter"])
    except LookupError as e:  # a class of the outputs not imported yet: captured again, the entry kept
        logger.info("onnxtrain: capture cache entry %s not used: %s", path, e)
        return None
    except Exception as e:  # noqa: BLE001 (whatever is wrong with the file, the graph is captured again)
        logger.warning("onnxtrain: capture cache entry %s is corrupt (%s: %s); capturing again", path,
                       type(e).__name__, e)
        try:
            os.remove(path)
        except OSError:
            pass
        return None
    try:
        os.utime(path)  # (last use: what eviction goes by)
    except OSError:
        pass
    return exported


def store(folder, k, exported):
    """Writes `exported` under key `k` atomically (a temporary file renamed into place). A folder that cannot be
    written warns once and stores nothing."""
    try:
        header = {"key": k, "format": FORMAT, "input_names": exported.input_names,
                  "state_names": exported.state_names, "output_names": exported.output_names,
                  "out_schema": _schema_to_json(exported.out_schema),
                  "exporter": exported.exporter, "torch": torch.__version__, "written": time.time()}
    except TypeError as e:
        logger.info("onnxtrain: the graph is not stored in the capture cache: its outputs hold %s", e)
        return
    head = json.dumps(header).encode()
    body = struct.pack("<Q", len(head)) + head + exported.model.SerializeToString()
    data = _MAGIC + hashlib.sha256(body).hexdigest().encode() + b"\n" + body
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".writing-", suffix=_SUFFIX)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, _path(folder, k))
        except BaseException:
            os.remove(tmp)
            raise
    except OSError as e:
        if folder not in _warned:
            _warned.add(folder)
            logger.warning("onnxtrain: the capture cache folder %s cannot be written (%s); running without it "
                           "(ONNXTRAIN_CAPTURE_CACHE names another folder, or 0 disables the cache)", folder,
                           e.strerror or e)
        return
    _evict(folder)


def _entries(folder):
    try:
        names = [n for n in os.listdir(folder) if n.endswith(_SUFFIX) and not n.startswith(".")]
    except OSError:
        return []
    found = []
    for n in names:
        try:
            st = os.stat(os.path.join(folder, n))
        except OSError:
            continue
        found.append((st.st_mtime, st.st_size, os.path.join(folder, n)))
    return sorted(found)


def _evict(folder):
    """Removes the least recently used entries while the folder holds more than MAX_BYTES."""
    entries = _entries(folder)
    total = sum(size for _, size, _ in entries)
    for _, size, path in entries[:-1]:  # (the newest stays, whatever its size)
        if total <= MAX_BYTES:
            break
        try:
            os.remove(path)
            total -= size
        except OSError:
            pass


def clear(folder=None):
    """Removes every entry of the capture cache (the default folder, or `folder`); returns how many."""
    removed = 0
    for _, _, path in _entries(folder or default_folder()):
        try:
            os.remove(path)
            removed += 1
        except OSError:
            pass
    return removed

