"""What the CUDA backend takes from the Python installation, checked without a GPU:
- its memory comes from PyTorch's CUDA allocator: the extension calls c10's allocator through the headers of the
  PyTorch it was built against, for that version alone. Checked through PyTorch's CPU allocator, by the same calls
  (on a GPU, test_cuda.py checks the CUDA one);
- cuBLASLt is loaded at run time from the nvidia-cublas wheel, and where it cannot be, the error says where it was
  looked for and how to install it."""
import os
import subprocess
import sys

import pytest
import torch

from onnxtrain import _onnxtrain as C
from onnxtrain import _cuda_setup

built = pytest.mark.skipif(not C.torch_built_against, reason="onnxtrain built without PyTorch's headers")


@built
def test_pytorchs_allocator_is_reached_by_the_calls_cuda_memory_takes():
    assert C.torch_built_against == torch.__version__
    for size in (1, 4096, 3 << 20):
        assert C.check_torch_allocator(_cuda_setup.LIBC10, torch.__version__, size) == ""


@built
def test_another_pytorch_or_no_library_is_refused_by_name():
    why = C.check_torch_allocator(_cuda_setup.LIBC10, "1.0.0")
    assert torch.__version__ in why and "1.0.0" in why
    why = C.check_torch_allocator("/nonexistent/libc10.so", torch.__version__)
    assert "/nonexistent/libc10.so" in why and "not loaded" in why


@pytest.mark.skipif(torch.version.cuda is not None, reason="this PyTorch has CUDA")
def test_without_pytorchs_cuda_the_memory_stays_cudamallocs():
    if not C.cuda_memory_source():  # a build without CUDA says so
        assert "without CUDA" in C.use_torch_cuda_memory(_cuda_setup.LIBC10, torch.__version__)
        return
    assert C.use_torch_cuda_memory(_cuda_setup.LIBC10, torch.__version__) != ""
    assert C.cuda_memory_source() == "cudaMalloc"


cuda_build = pytest.mark.skipif(not C.cuda_memory_source(), reason="onnxtrain built without CUDA")


@cuda_build
def test_cublaslt_loads_from_the_nvidia_wheel_without_a_gpu():
    path = C.cublaslt_library()
    assert os.path.basename(path).startswith("libcublasLt.so.") and os.path.isfile(path)
    assert f"{os.sep}nvidia{os.sep}" in path  # (the wheel's: this PyTorch has no CUDA to have loaded one)


@cuda_build
def test_a_missing_cublaslt_is_a_clear_error():
    code = ("import onnxtrain\n"
            "try:\n    onnxtrain._onnxtrain.cublaslt_library()\n"
            "except onnxtrain.UnsupportedError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "ONNXTRAIN_CUBLASLT": "/nonexistent/libcublasLt.so"}).stdout
    assert "/nonexistent/libcublasLt.so" in out and "pip install nvidia-cublas" in out, out
