// PyTorch's allocator, from C++ without linking PyTorch: c10::GetAllocator found in the libc10 PyTorch has loaded,
// called through the c10/core/Allocator.h of the PyTorch this extension was built against (CMake finds it), and
// only while the PyTorch running is that one: the allocator's virtual table is its version's.
#pragma once
#include <cstddef>
#include <optional>
#include <string>

namespace onnxtrain::python {

class TorchAllocator {
 public:
  enum class Kind { kCpu, kCuda };  // which of PyTorch's allocators (c10::DeviceType CPU, CUDA)
  // The allocator of `kind` in the libc10 at `libc10` (loaded by PyTorch `version`), or nullopt and the reason in
  // `why`: a build without PyTorch's headers, another version, a library not loaded, no allocator of that kind.
  static std::optional<TorchAllocator> find(const std::string& libc10, const std::string& version, Kind kind,
                                            std::string* why);
  // A block of `bytes` on the current device and (CUDA) PyTorch's current stream; nullptr when it has no room.
  void* allocate(size_t bytes) const;
  void release(void* block) const;

 private:
  TorchAllocator(void* get, Kind kind) : get_(get), kind_(kind) {}
  void* get_;  // c10::GetAllocator's address (cast to its type where c10's headers are seen)
  Kind kind_;
};

// The version of PyTorch this extension's allocator calls were built against ("" without its headers).
std::string torch_built_against();

}  // namespace onnxtrain::python
