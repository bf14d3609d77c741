#include "runtime/memory_recorder.h"

namespace onnxtrain::runtime {

static thread_local MemoryRecorder* current_recorder = nullptr;

MemoryRecorder::MemoryRecorder(CachingAllocator& alloc)
    : alloc_(alloc), observer_id_(alloc.add_observer([this](const void* b, int64_t n) { observe(b, n); })) {}

MemoryRecorder::~MemoryRecorder() { alloc_.remove_observer(observer_id_); }

MemoryRecorder::Scope::Scope(MemoryRecorder* recorder) : previous_(current_recorder) { current_recorder = recorder; }

MemoryRecorder::Scope::~Scope() { current_recorder = previous_; }

void MemoryRecorder::observe(const void* block, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (bytes > 0) {
    if (current_recorder != this) return;  // another session's, or made outside the recorded calls
    open_[block] = events_.size();
    events_.push_back({step_, bytes, nullptr});
    return;
  }
  auto it = open_.find(block);
  if (it == open_.end()) return;  // not recorded when allocated
  events_.push_back({step_, bytes, events_[it->second].value});
  open_.erase(it);
}

void MemoryRecorder::at_step(size_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  step_ = step;
}

void MemoryRecorder::label(const void* block, const ir::Value* v, const std::vector<int64_t>& dims) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = open_.find(block);
  if (it != open_.end()) events_[it->second].value = v;
  if (!v || !v->has_shape || v->shape.size() != dims.size()) return;
  for (size_t i = 0; i < dims.size(); ++i)
    if (auto name = v->shape[i].lone_symbol()) observed_.emplace(*name, dims[i]);
}

}  // namespace onnxtrain::runtime
