// Where a tensor's bytes live and which kernels run on them: a device type and an index, as DLPack names them.
// The host CPU is {kCpu, 0}; another device type registers its memory (a DeviceMemory per index, under its own
// caching allocator, core/allocator.h) and its kernels (kernels/kernel.h, in src/kernels/<device>/), and touches
// nothing else.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace onnxtrain {

// DLPack's DLDeviceType codes (python/dlpack_bridge.cpp checks they match dlpack.h).
enum class DeviceType : int32_t {
  kCpu = 1,
  kCuda = 2,
  kExtDev = 12,  // a device of the embedder's own (the tests' second device)
};

// "cpu", "cuda", "ext".
std::string device_type_name(DeviceType type);

struct Device {
  DeviceType type = DeviceType::kCpu;
  int index = 0;
  friend bool operator==(Device a, Device b) { return a.type == b.type && a.index == b.index; }
  friend bool operator<(Device a, Device b) { return a.type != b.type ? a.type < b.type : a.index < b.index; }
  // "cpu", "cuda:0", "ext:7": as PyTorch writes a device.
  std::string str() const;
};
inline constexpr Device kCpu{DeviceType::kCpu, 0};
inline constexpr Device cuda_device(int index) { return {DeviceType::kCuda, index}; }
// "cpu", "cuda", "cuda:N" (as PyTorch writes them); an InputError for anything else.
Device parse_device(const std::string& s);

// A device's raw memory: what the caching allocator reserves blocks from, and how bytes get there from the host.
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  // A block of `bytes` aligned to `alignment`; nullptr when the device has no room.
  virtual void* reserve(size_t bytes, size_t alignment) = 0;
  virtual void release(void* block) = 0;
  // release() of a block whose every use was queued on the calling thread's queue (queue()), which the device's
  // own allocator filed it under when reserved: the device may hand it out again at once, to work queued after it
  // on that queue, without waiting for the device (as a stream-ordered allocator does). By default, release().
  virtual void release_in_queue_order(void* block) { release(block); }
  virtual void copy_from_host(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy_to_host(void* dst, const void* src, size_t bytes) = 0;
  // Whether the host can read this memory in place (host memory, unified memory). If not, the inputs an op reads
  // on the host (ops::Op::host_inputs) are copied there before its shape function and kernel run.
  virtual bool host_readable() const = 0;
  // Waits until the work queued on this memory by the calling thread has completed (before another party reads
  // it on its own queue); nothing to wait for on the host.
  virtual void synchronize() {}
  // The queue the calling thread's work on this device goes on (a CUDA stream), as an opaque handle: nullptr, the
  // device's default queue, until set_queue (QueueScope) gives another. The host has none.
  virtual void* queue() const { return nullptr; }
  virtual void set_queue(void* queue) {}
};

// While it lives, the calling thread's work on `device` (kernels, copies, synchronize()) goes on `queue`, a handle
// the caller owns and keeps alive (PyTorch's current CUDA stream, so that onnxtrain's work and PyTorch's are
// ordered without waiting); then the thread's queue before comes back. Nothing on the host.
class QueueScope {
 public:
  QueueScope(Device device, void* queue);
  ~QueueScope();
  QueueScope(const QueueScope&) = delete;
  QueueScope& operator=(const QueueScope&) = delete;

 private:
  DeviceMemory* memory_ = nullptr;
  void* before_ = nullptr;
};

// The host's memory: blocks of 1 MiB and more mapped from the system (mmap, munmap), smaller ones from malloc.
DeviceMemory& host_memory();

}  // namespace onnxtrain
