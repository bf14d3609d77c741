"""The CUDA devices' memory from PyTorch's CUDA allocator, set at import (src/python/torch_memory.cpp): onnxtrain's
caching allocator takes its segments from it, so that torch.cuda.memory_allocated and max_memory_allocated count
them, torch.cuda.set_per_process_memory_fraction bounds them, and the blocks PyTorch caches serve both. Where that
cannot be (a build without CUDA, a PyTorch other than the one onnxtrain was built against), from cudaMalloc."""

import logging
import os

import torch

from onnxtrain import _onnxtrain as C

LIBC10 = os.path.join(os.path.dirname(torch.__file__), "lib", "libc10.so")

if torch.version.cuda and C.cuda_memory_source():
    why_not = C.use_torch_cuda_memory(LIBC10, torch.__version__)
    if why_not:
        logging.getLogger("onnxtrain").warning("onnxtrain: CUDA memory from cudaMalloc, which PyTorch's memory "
                                               "statistics and limits do not see: %s", why_not)
