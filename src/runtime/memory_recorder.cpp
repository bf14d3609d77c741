#include "runtime/memory_recorder.h"

namespace onnxtrain::runtime {

MemoryRecorder::MemoryRecorder(CachingAllocator& alloc) : alloc_(alloc) {
  alloc_.set_observer([this](const void* block, int64_t bytes) {
    if (bytes > 0) {
      open_[block] = events_.size();
      events_.push_back({step_, bytes, nullptr});
      return;
    }
    auto it = open_.find(block);
    if (it == open_.end()) return;  // allocated before recording started
    events_.push_back({step_, bytes, events_[it->second].value});
    open_.erase(it);
  });
}

MemoryRecorder::~MemoryRecorder() { alloc_.set_observer(nullptr); }

void MemoryRecorder::label(const void* block, const ir::Value* v) {
  auto it = open_.find(block);
  if (it != open_.end()) events_[it->second].value = v;
}

}  // namespace onnxtrain::runtime
