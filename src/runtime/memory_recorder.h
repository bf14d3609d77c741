// Records the allocations a session makes while it is installed (on the threads running that session's calls,
// so that two sessions sharing one allocator each record their own), and the frees of those blocks, with the
// step of the execution plan that was running and, for blocks that hold a node's output, the value they hold.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "core/allocator.h"
#include "ir/graph.h"

namespace onnxtrain::runtime {

struct AllocationEvent {
  size_t step = 0;                   // the plan step running when it happened
  int64_t bytes = 0;                 // > 0 an allocation, < 0 a free (rounded, as the allocator counts)
  const ir::Value* value = nullptr;  // the value the block held (nullptr: kernel scratch)
};

class MemoryRecorder {
 public:
  // Observes `alloc` until destroyed.
  explicit MemoryRecorder(CachingAllocator& alloc);
  ~MemoryRecorder();
  MemoryRecorder(const MemoryRecorder&) = delete;
  MemoryRecorder& operator=(const MemoryRecorder&) = delete;

  // While one lives, the allocations of its thread are `recorder`'s (none when null).
  class Scope {
   public:
    explicit Scope(MemoryRecorder* recorder);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    MemoryRecorder* previous_;
  };

  void at_step(size_t step);
  // The executor names the value a block it just allocated holds, and gives its dims: each of the value's dims
  // that is one symbol is bound to its dim (symbols the call's inputs do not give: a Reshape's to a shape computed
  // at run time).
  void label(const void* block, const ir::Value* v, const std::vector<int64_t>& dims);
  // What was recorded; read when recording has ended.
  const std::vector<AllocationEvent>& events() const { return events_; }
  const Bindings& observed() const { return observed_; }

 private:
  void observe(const void* block, int64_t bytes);
  CachingAllocator& alloc_;
  int observer_id_;
  std::mutex mu_;  // the allocator calls observe() from any thread that frees a block
  size_t step_ = 0;
  std::vector<AllocationEvent> events_;
  std::map<const void*, size_t> open_;  // live block -> its allocation event
  Bindings observed_;
};

}  // namespace onnxtrain::runtime
