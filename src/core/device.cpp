#include "core/device.h"

#include <cstdlib>
#include <cstring>

namespace onnxtrain {

namespace {
class HostMemory : public DeviceMemory {
 public:
  void* reserve(size_t bytes, size_t alignment) override { return std::aligned_alloc(alignment, bytes); }
  void release(void* block) override { std::free(block); }
  void copy_from_host(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  bool host_readable() const override { return true; }
};
}  // namespace

DeviceMemory& host_memory() {
  static HostMemory m;
  return m;
}

}  // namespace onnxtrain
