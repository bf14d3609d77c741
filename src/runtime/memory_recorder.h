// Records every allocation and free the caching allocator serves while it is
// installed, with the step of the execution plan that was running and, for
// blocks that hold a node's output, the value they hold.
#pragma once
#include <cstdint>
#include <map>
#include <vector>

#include "core/allocator.h"
#include "ir/graph.h"

namespace onnxtrain::runtime {

struct AllocationEvent {
  size_t step = 0;                  // the plan step running when it happened
  int64_t bytes = 0;                // > 0 an allocation, < 0 a free (rounded, as the allocator counts)
  const ir::Value* value = nullptr; // the value the block held (nullptr: kernel scratch)
};

class MemoryRecorder {
 public:
  // Installs itself as `alloc`'s observer until destroyed.
  explicit MemoryRecorder(CachingAllocator& alloc);
  ~MemoryRecorder();
  MemoryRecorder(const MemoryRecorder&) = delete;
  MemoryRecorder& operator=(const MemoryRecorder&) = delete;

  void at_step(size_t step) { step_ = step; }
  // The executor names the value a block it just allocated holds.
  void label(const void* block, const ir::Value* v);
  const std::vector<AllocationEvent>& events() const { return events_; }

 private:
  CachingAllocator& alloc_;
  size_t step_ = 0;
  std::vector<AllocationEvent> events_;
  std::map<const void*, size_t> open_;  // live block -> its allocation event
};

}  // namespace onnxtrain::runtime
