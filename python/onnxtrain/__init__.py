"""onnxtrain: train PyTorch models and ONNX graphs with a C++ runtime that plans memory."""

from onnxtrain._onnxtrain import (
    CheckpointError,
    ConfigError,
    Error,
    InputError,
    IoError,
    ModelError,
    OptimizerOptions,
    OutOfMemoryError,
    RunState,
    Session,
    SessionOptions,
    ShapeError,
    TrainingSession,
    UnsupportedError,
    allocator_stats,
    device_available,
    empty_cache,
    registered_ops,
    reset_peak_stats,
    set_memory_limit,
)

from onnxtrain._capture.capture_cache import clear as clear_capture_cache
from onnxtrain._capture.experts import use_dense_experts
from onnxtrain.memory_log import log_memory_usage, memory_stats
from onnxtrain.memory_log import subscribe as subscribe_memory_stats
from onnxtrain import _python_op  # noqa: F401 (sets the calls custom autograd Functions run through)
from onnxtrain import _cuda_setup  # noqa: F401 (CUDA memory from PyTorch's allocator, cuBLASLt's folders)
from onnxtrain import optim
from onnxtrain.module import Module
from onnxtrain.options import Options

__all__ = [
    "ConfigError",
    "Module",
    "Options",
    "CheckpointError",
    "Error",
    "InputError",
    "IoError",
    "ModelError",
    "OptimizerOptions",
    "OutOfMemoryError",
    "RunState",
    "Session",
    "SessionOptions",
    "ShapeError",
    "TrainingSession",
    "UnsupportedError",
    "allocator_stats",
    "clear_capture_cache",
    "device_available",
    "empty_cache",
    "log_memory_usage",
    "memory_stats",
    "optim",
    "registered_ops",
    "reset_peak_stats",
    "set_memory_limit",
    "subscribe_memory_stats",
    "use_dense_experts",
]
