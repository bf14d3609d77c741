// Where a tensor's bytes live and which kernels run on them. Device 0 is the host CPU; another device registers
// its memory (a DeviceMemory under its own caching allocator, core/allocator.h) and its kernels
// (kernels/kernel.h, in src/kernels/<device>/), and touches nothing else.
#pragma once
#include <cstddef>
#include <string>

namespace onnxtrain {

struct Device {
  int id = 0;
  friend bool operator==(Device a, Device b) { return a.id == b.id; }
  std::string str() const { return id == 0 ? "cpu" : "device" + std::to_string(id); }
};
inline constexpr Device kCpu{0};

// A device's raw memory: what the caching allocator reserves blocks from, and how bytes get there from the host.
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  // A block of `bytes` aligned to `alignment`; nullptr when the device has no room.
  virtual void* reserve(size_t bytes, size_t alignment) = 0;
  virtual void release(void* block) = 0;
  virtual void copy_from_host(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy_to_host(void* dst, const void* src, size_t bytes) = 0;
  // Whether the host can read this memory in place (host memory, unified memory). If not, the inputs an op reads
  // on the host (ops::Op::host_inputs) are copied there before its shape function and kernel run.
  virtual bool host_readable() const = 0;
};

// The host's memory: blocks of 1 MiB and more mapped from the system (mmap, munmap), smaller ones from malloc.
DeviceMemory& host_memory();

}  // namespace onnxtrain
