#include "python/torch_allocator.h"

#include <dlfcn.h>

#ifdef ONNXTRAIN_TORCH_VERSION
#include <c10/core/Allocator.h>
#endif

namespace onnxtrain::python {

#ifdef ONNXTRAIN_TORCH_VERSION

namespace {
using GetAllocator = c10::Allocator* (*)(const c10::DeviceType&);

c10::DeviceType device_type(TorchAllocator::Kind kind) {
  return kind == TorchAllocator::Kind::kCuda ? c10::DeviceType::CUDA : c10::DeviceType::CPU;
}

c10::Allocator* allocator(void* get, TorchAllocator::Kind kind) {
  const c10::DeviceType t = device_type(kind);
  return reinterpret_cast<GetAllocator>(get)(t);  // (throws c10::Error where none is set)
}
}  // namespace

std::string torch_built_against() { return ONNXTRAIN_TORCH_VERSION; }

std::optional<TorchAllocator> TorchAllocator::find(const std::string& libc10, const std::string& version, Kind kind,
                                                   std::string* why) {
  if (version != ONNXTRAIN_TORCH_VERSION) {
    *why = "onnxtrain was built against PyTorch " + std::string(ONNXTRAIN_TORCH_VERSION) + ", this is " + version +
           " (reinstall onnxtrain to use its allocator)";
    return std::nullopt;
  }
  void* lib = dlopen(libc10.c_str(), RTLD_NOW | RTLD_NOLOAD);  // (PyTorch keeps it loaded: no reference held)
  if (!lib) {
    *why = libc10 + " is not loaded (import torch first)";
    return std::nullopt;
  }
  void* get = dlsym(lib, "_ZN3c1012GetAllocatorERKNS_10DeviceTypeE");  // c10::GetAllocator(const DeviceType&)
  dlclose(lib);
  if (!get) {
    *why = libc10 + " has no c10::GetAllocator";
    return std::nullopt;
  }
  c10::Allocator* a = nullptr;
  try {
    a = allocator(get, kind);
  } catch (...) {  // (c10::Error: none registered)
  }
  if (!a || !a->raw_deleter()) {
    *why = std::string("this PyTorch has no ") + (kind == Kind::kCuda ? "CUDA" : "CPU") + " allocator";
    return std::nullopt;
  }
  return TorchAllocator(get, kind);
}

void* TorchAllocator::allocate(size_t bytes) const {
  try {
    // The block and its context are one pointer for PyTorch's CPU and CUDA allocators: released, the context is
    // the block, freed by the allocator's raw deleter.
    c10::DataPtr block = allocator(get_, kind_)->allocate(bytes);
    if (block.get() != block.get_context()) return nullptr;  // (an allocator plugged in that works otherwise)
    return block.release_context();
  } catch (...) {  // c10::OutOfMemoryError, the device full
    return nullptr;
  }
}

void TorchAllocator::release(void* block) const {
  allocator(get_, kind_)->raw_deleter()(block);
}

#else

std::string torch_built_against() { return ""; }

std::optional<TorchAllocator> TorchAllocator::find(const std::string&, const std::string&, Kind, std::string* why) {
  *why = "onnxtrain was built without PyTorch's headers (no PyTorch found when it was built)";
  return std::nullopt;
}

void* TorchAllocator::allocate(size_t) const { return nullptr; }
void TorchAllocator::release(void*) const {}

#endif

}  // namespace onnxtrain::python
