// What the CUDA backend takes from the Python installation, which onnxtrain._cuda_setup gives at import: the CUDA
// devices' memory from PyTorch's allocator (python/torch_allocator.h: onnxtrain's caching allocator takes its
// segments from it), and the folders of the NVIDIA wheels cuBLASLt is loaded from, through the CUDA runtime's
// device-neutral hooks (kernels/device_runtime.h).
#include <cstring>

#include "kernels/device_runtime.h"
#include "onnxtrain/error.h"
#include "python/init.h"
#include "python/torch_allocator.h"

namespace py = pybind11;

namespace onnxtrain::python {
namespace {

// The CUDA runtime's hooks; UnsupportedError in a build without CUDA.
const kernels::DeviceRuntime& cuda() {
  const kernels::DeviceRuntime* r = kernels::device_runtime(DeviceType::kCuda);
  if (!r) throw UnsupportedError("this onnxtrain was built without CUDA");
  return *r;
}

}  // namespace

void init_cuda_setup(py::module_& m) {
  m.def(
      "use_torch_cuda_memory",
      [](const std::string& libc10, const std::string& version) -> std::string {
        if (!kernels::device_runtime(DeviceType::kCuda)) return "this onnxtrain was built without CUDA";
        std::string why;
        auto a = TorchAllocator::find(libc10, version, TorchAllocator::Kind::kCuda, &why);
        if (!a) return why;
        cuda().set_memory_source({"PyTorch's CUDA allocator", [a](size_t bytes) { return a->allocate(bytes); },
                                  [a](void* block) { a->release(block); }});
        return "";
      },
      py::arg("libc10"), py::arg("version"),
      "CUDA devices that take their first block from now take their memory from PyTorch's CUDA allocator, found in "
      "the libc10 at `libc10` (loaded by PyTorch `version`): '', or why they cannot (they then take it from "
      "cudaMalloc).");
  m.def(
      "cuda_memory_source",
      []() -> std::string {
        return kernels::device_runtime(DeviceType::kCuda) ? cuda().memory_source() : std::string();
      },
      "Where a CUDA device taking its first block from now takes its memory: 'cudaMalloc', \"PyTorch's CUDA "
      "allocator\", or '' in a build without CUDA.");
  m.def(
      "check_torch_allocator",
      [](const std::string& libc10, const std::string& version, size_t bytes) -> std::string {
        std::string why;
        auto a = TorchAllocator::find(libc10, version, TorchAllocator::Kind::kCpu, &why);
        if (!a) return why;
        void* block = a->allocate(bytes);
        if (!block) return "PyTorch's CPU allocator gave no block of " + std::to_string(bytes) + " bytes";
        std::memset(block, 0x5a, bytes);
        a->release(block);
        return "";
      },
      py::arg("libc10"), py::arg("version"), py::arg("bytes") = 1 << 20,
      "Takes a block of `bytes` from PyTorch's CPU allocator by the calls CUDA memory takes from its CUDA allocator, "
      "fills it and gives it back: '' when this build's view of PyTorch's allocator fits the PyTorch running, or "
      "why not.");
  m.attr("torch_built_against") = torch_built_against();
  m.def(
      "add_cublaslt_dir",
      [](const std::string& dir) {
        if (kernels::device_runtime(DeviceType::kCuda)) cuda().add_library_dir(dir);
      },
      py::arg("dir"),
      "A folder to look for cuBLASLt in (after the libraries the process has loaded), before its first use.");
  m.def(
      "cuda_copies_to_host", [] { return cuda().copies_to_host(); },
      "Copies onnxtrain made from a GPU to the host since the process began (a step with static shapes makes none; "
      "PyTorch's own, as loss.item(), are not counted).");
  m.def(
      "cublaslt_library", [] { return cuda().math_library(); },
      "The file cuBLASLt was loaded from, loading it now if it was not (UnsupportedError: where it was looked for).");
}

}  // namespace onnxtrain::python
