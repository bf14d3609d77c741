"""What the CUDA backend takes from the Python installation, given at import (src/python/cuda_setup.cpp):
- the CUDA devices' memory, from PyTorch's CUDA allocator: onnxtrain's caching allocator takes its segments from it,
  so that torch.cuda.memory_allocated and max_memory_allocated count them, torch.cuda.set_per_process_memory_fraction
  bounds them, and the blocks PyTorch caches serve both. Where that cannot be (a build without CUDA, a PyTorch other
  than the one onnxtrain was built against), from cudaMalloc;
- the folders of the NVIDIA wheels (nvidia-cublas: nvidia/cu13/lib), where cuBLASLt is looked for at its first use
  when PyTorch has not loaded it already."""

import glob
import importlib.util
import logging
import os

import torch

from onnxtrain import _onnxtrain as C

LIBC10 = os.path.join(os.path.dirname(torch.__file__), "lib", "libc10.so")


def _use_torch_cuda_memory():
    why_not = C.use_torch_cuda_memory(LIBC10, torch.__version__)
    if why_not:
        logging.getLogger("onnxtrain").warning("onnxtrain: CUDA memory from cudaMalloc, which PyTorch's memory "
                                               "statistics and limits do not see: %s", why_not)


# Once PyTorch has initialized CUDA (its allocator serves no block before): at once if it has, else when it does
# (importing onnxtrain initializes nothing, so that a process can still fork). A device that took memory before
# then keeps cudaMalloc; one only looked at (device_available) does not.
if torch.version.cuda and C.cuda_memory_source():
    torch.cuda._lazy_call(_use_torch_cuda_memory)

_nvidia = importlib.util.find_spec("nvidia")
for _root in (_nvidia.submodule_search_locations or []) if _nvidia else []:
    for _lib in sorted(glob.glob(os.path.join(_root, "cu*", "lib"))):  # (nvidia/cu13/lib: the CUDA 13 wheels')
        C.add_cublaslt_dir(_lib)
