// onnxtrain's caching allocator, per device, as its users see it: statistics, peaks, a limit.
#pragma once
#include <cstdint>

#include "onnxtrain/device.h"

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

MemoryStats memory_stats(Device device = kCpu);
// Sets every peak of the device's allocator to its current value.
void reset_peak_stats(Device device = kCpu);
// Allocations past this many allocated bytes raise OutOfMemoryError; 0 removes the limit.
void set_memory_limit(int64_t bytes, Device device = kCpu);
// Returns the device allocator's unused cached blocks to the system.
void empty_cache(Device device = kCpu);

}  // namespace onnxtrain
