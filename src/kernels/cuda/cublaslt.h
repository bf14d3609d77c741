// cuBLASLt, loaded at run time (dlopen), so that a build with CUDA loads and runs where the library is missing: from
// the libraries the process has loaded already (PyTorch's CUDA wheels bring it), the folders the embedder adds (the
// Python package adds the nvidia-cublas wheel's), or the system's search path; ONNXTRAIN_CUBLASLT may name the file.
// Compiled against the nvidia-cublas wheel's cublasLt.h; the library loaded must have its major version.
#pragma once
#include <cublasLt.h>

#include <string>

namespace onnxtrain::kernels::cuda {

struct CublasLt {
  decltype(&cublasLtGetVersion) get_version;
  decltype(&cublasLtGetStatusString) status_string;
  decltype(&cublasLtCreate) create;
  decltype(&cublasLtMatmulDescCreate) desc_create;
  decltype(&cublasLtMatmulDescDestroy) desc_destroy;
  decltype(&cublasLtMatmulDescSetAttribute) desc_set;
  decltype(&cublasLtMatrixLayoutCreate) layout_create;
  decltype(&cublasLtMatrixLayoutDestroy) layout_destroy;
  decltype(&cublasLtMatrixLayoutSetAttribute) layout_set;
  decltype(&cublasLtMatmulPreferenceCreate) preference_create;
  decltype(&cublasLtMatmulPreferenceDestroy) preference_destroy;
  decltype(&cublasLtMatmulPreferenceSetAttribute) preference_set;
  decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic;
  decltype(&cublasLtMatmul) matmul;
  std::string path;  // the file it was loaded from
};

// A folder to look for the library in, after the libraries already loaded (before the first use).
void add_cublaslt_dir(const std::string& dir);
// The library, loaded at the first call; an UnsupportedError saying where it was looked for and how to install it
// when it cannot be.
const CublasLt& cublaslt();

}  // namespace onnxtrain::kernels::cuda
