// A small size-keyed caching allocator whose statistics are public API, one per device.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>

#include "core/device.h"

namespace onnxtrain {

struct MemoryStats {
  int64_t allocated = 0;  // bytes handed out and not yet freed (requests, rounded)
  int64_t peak_allocated = 0;
  int64_t cached = 0;  // bytes reserved from the system, in use or not
  int64_t peak_cached = 0;
  int64_t inactive = 0;  // cached - allocated: reserved but not handed out
  int64_t peak_inactive = 0;
  int64_t num_allocs = 0;  // allocations served since creation
  int64_t num_frees = 0;
  int64_t limit = 0;  // 0: no limit
};

class CachingAllocator {
 public:
  static constexpr size_t kAlignment = 64;
  // Every request is rounded up to this granule; the planner rounds the same way.
  static size_t round_size(size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

  // Blocks of `device`'s memory (the host's by default).
  explicit CachingAllocator(Device device = kCpu, DeviceMemory& memory = host_memory())
      : device_(device), memory_(memory) {}
  ~CachingAllocator();
  Device device() const { return device_; }
  DeviceMemory& memory() const { return memory_; }
  void* allocate(size_t bytes);
  void free(void* p);
  MemoryStats stats() const;
  void reset_peaks();
  // Limit on allocated bytes; past it allocate() throws OutOfMemoryError. 0 removes it.
  void set_limit(int64_t bytes);
  // Returns unused cached blocks to the system.
  void empty_cache();
  // Called (under the allocator's lock: it must not allocate from this allocator) with every block handed
  // out (+rounded bytes) and taken back (-rounded bytes); an empty function removes it.
  using Observer = std::function<void(const void* block, int64_t bytes)>;
  void set_observer(Observer observer);

  // The host's allocator.
  static CachingAllocator& global();
  // The allocator of a device; kCpu's is global(). Another device's is registered once, before use.
  static CachingAllocator& of(Device device);
  static void register_device(Device device, DeviceMemory& memory);

 private:
  void update_peaks();
  void release_free_blocks();  // with mu_ held
  Device device_;
  DeviceMemory& memory_;
  mutable std::mutex mu_;
  std::multimap<size_t, void*> free_blocks_;         // block size -> block
  std::map<void*, std::pair<size_t, size_t>> used_;  // block -> (block size, rounded request)
  MemoryStats s_;
  Observer observer_;
};

}  // namespace onnxtrain
