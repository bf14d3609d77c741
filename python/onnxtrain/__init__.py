"""onnxtrain: train PyTorch models and ONNX graphs with a C++ runtime that plans memory."""

from onnxtrain._onnxtrain import (
    Error,
    InputError,
    IoError,
    ModelError,
    OutOfMemoryError,
    RunState,
    Session,
    ShapeError,
    UnsupportedError,
    allocator_stats,
    empty_cache,
    registered_ops,
    reset_peak_stats,
    set_memory_limit,
)

__all__ = [
    "Error",
    "InputError",
    "IoError",
    "ModelError",
    "OutOfMemoryError",
    "RunState",
    "Session",
    "ShapeError",
    "UnsupportedError",
    "allocator_stats",
    "empty_cache",
    "registered_ops",
    "reset_peak_stats",
    "set_memory_limit",
]
