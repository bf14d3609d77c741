#include "core/allocator.h"

#include <algorithm>
#include <iterator>
#include <memory>
#include <string>

#include "onnxtrain/error.h"

namespace onnxtrain {

static std::string mib(int64_t b) {
  return std::to_string(b / (1024 * 1024)) + " MiB (" + std::to_string(b) + " bytes)";
}

CachingAllocator::~CachingAllocator() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  idle_cv_.notify_all();
  if (idle_thread_.joinable()) idle_thread_.join();
  release_free_blocks();
  // What stays is in segments still in use (their memory the process's until it ends): the blocks' records go.
  for (auto& pool : free_blocks_)
    for (auto& [size, b] : pool) delete b;
  for (auto& [p, b] : used_) delete b;
}

void* CachingAllocator::allocate(size_t bytes) {
  size_t rounded = round_size(bytes == 0 ? 1 : bytes);
  std::lock_guard<std::mutex> lock(mu_);
  if (s_.limit > 0 && s_.allocated + int64_t(rounded) > s_.limit)
    throw OutOfMemoryError("[allocator] out of memory: request of " + mib(rounded) + " with " + mib(s_.allocated) +
                           " allocated and a limit of " + mib(s_.limit));
  note_queue();
  const bool small = rounded < kSmall;
  auto& pool = free_blocks_[small];
  auto it = pool.lower_bound(rounded);  // the best fit in the request's pool
  Block* b = nullptr;
  if (it != pool.end()) {
    b = it->second;
    take(b);
  } else {
    b = new_segment(small ? kSmallSegment : rounded, small);
  }
  b->requested = rounded;
  if (b->size > rounded + rounded / 8) {  // its front; the rest stays free (a slack up to an eighth goes along)
    Block* rest = new Block{b->ptr + rounded, b->size - rounded};
    rest->small = small;
    rest->prev = b, rest->next = b->next;
    if (b->next) b->next->prev = rest;
    b->next = rest;
    b->size = rounded;
    make_free(rest);
  }
  void* p = b->ptr;
  used_[p] = b;
  s_.allocated += rounded;
  high_water_ = std::max(high_water_, s_.allocated);
  s_.num_allocs++;
  update_peaks();
  for (auto& [id, observe] : observers_) observe(p, int64_t(rounded));
  return p;
}

void CachingAllocator::free(void* p) {
  if (!p) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = used_.find(p);
  if (it == used_.end()) return;
  note_queue();
  Block* b = it->second;
  used_.erase(it);
  s_.allocated -= int64_t(b->requested);
  for (auto& [id, observe] : observers_) observe(p, -int64_t(b->requested));
  b->requested = 0;
  make_free(b);
  s_.num_frees++;
  update_peaks();
}

void CachingAllocator::make_free(Block* b) {
  for (Block* n : {b->prev, b->next}) {
    if (!n || n->requested) continue;  // (a block not in use is free: listed)
    take(n);
    Block* first = n == b->prev ? n : b;  // n merges into b, or b into n, keeping the lower address
    Block* second = first == n ? b : n;
    first->size += second->size;
    first->next = second->next;
    if (second->next) second->next->prev = first;
    delete second;
    b = first;
  }
  b->free_at = free_blocks_[b->small].emplace(b->size, b);
}

void CachingAllocator::take(Block* b) { free_blocks_[b->small].erase(b->free_at); }

CachingAllocator::Block* CachingAllocator::new_segment(size_t bytes, bool small) {
  if (!small) release_beyond_high_water(bytes);  // (a small segment's few MiB never push a large one out)
  void* p = memory_.reserve(bytes, kAlignment);
  if (!p) {
    release_free_blocks();
    p = memory_.reserve(bytes, kAlignment);
  }
  if (!p)
    throw OutOfMemoryError("[allocator] the system refused " + mib(int64_t(bytes)) + " with " + mib(s_.allocated) +
                           " allocated");
  s_.cached += int64_t(bytes);
  Block* b = new Block{static_cast<char*>(p), bytes};
  b->small = small;
  return b;
}

void CachingAllocator::note_queue() {
  void* q = memory_.queue();
  if (!queue_) queue_ = q;
  queues_ = queues_ || *queue_ != q;
}

void CachingAllocator::release(Block* b) {
  take(b);
  if (!queues_ && queue_ && *queue_ == memory_.queue())
    memory_.release_in_queue_order(b->ptr);
  else
    memory_.release(b->ptr);
  s_.cached -= int64_t(b->size);
  delete b;
}

void CachingAllocator::update_peaks() {
  s_.inactive = s_.cached - s_.allocated;
  if (s_.allocated > s_.peak_allocated) s_.peak_allocated = s_.allocated;
  if (s_.cached > s_.peak_cached) s_.peak_cached = s_.cached;
  if (s_.inactive > s_.peak_inactive) s_.peak_inactive = s_.inactive;
}

MemoryStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return s_;
}

void CachingAllocator::reset_peaks() {
  std::lock_guard<std::mutex> lock(mu_);
  s_.peak_allocated = s_.allocated;
  s_.peak_cached = s_.cached;
  s_.peak_inactive = s_.inactive;
}

int CachingAllocator::add_observer(Observer observer) {
  std::lock_guard<std::mutex> lock(mu_);
  observers_[next_observer_] = std::move(observer);
  return next_observer_++;
}

void CachingAllocator::remove_observer(int id) {
  std::lock_guard<std::mutex> lock(mu_);
  observers_.erase(id);
}

void CachingAllocator::set_limit(int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  s_.limit = bytes;
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  release_free_blocks();
}

void CachingAllocator::trim() {
  std::lock_guard<std::mutex> lock(mu_);
  trim_locked();
}

void CachingAllocator::trim_locked() {
  release_free_blocks();
  high_water_ = s_.allocated;
  idle_deadline_.reset();
}

void CachingAllocator::trim_when_idle(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  if (seconds <= 0) {
    trim_locked();
    return;
  }
  idle_deadline_ = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                          std::chrono::duration<double>(seconds));
  idle_allocs_ = s_.num_allocs;
  if (!idle_thread_.joinable()) idle_thread_ = std::thread(&CachingAllocator::idle_loop, this);
  idle_cv_.notify_all();
}

void CachingAllocator::idle_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    if (!idle_deadline_) {
      idle_cv_.wait(lock);
    } else if (std::chrono::steady_clock::now() < *idle_deadline_) {
      idle_cv_.wait_until(lock, *idle_deadline_);
    } else {
      if (s_.num_allocs == idle_allocs_) trim_locked();
      idle_deadline_.reset();  // (a step under way schedules again at its end)
    }
  }
}

void CachingAllocator::release_beyond_high_water(size_t bytes) {
  const int64_t bound = std::max(high_water_, s_.allocated + int64_t(bytes));
  for (auto& pool : free_blocks_)
    for (auto it = pool.end(); it != pool.begin() && s_.cached + int64_t(bytes) > bound;) {
      Block* b = (--it)->second;  // largest first
      if (!b->whole()) continue;  // (a part of a segment in use stays)
      it = std::next(it);
      release(b);
    }
  s_.inactive = s_.cached - s_.allocated;
}

void CachingAllocator::release_free_blocks() {
  for (auto& pool : free_blocks_)
    for (auto it = pool.begin(); it != pool.end();) {
      Block* b = (it++)->second;
      if (b->whole()) release(b);
    }
  s_.inactive = s_.cached - s_.allocated;
}

CachingAllocator& CachingAllocator::global() {
  static CachingAllocator a;
  return a;
}

static std::mutex& devices_mu() {
  static std::mutex mu;
  return mu;
}

// Never destroyed: a device's runtime (CUDA's) may shut down before static destructors run, and an allocator
// returning its blocks then would call into it; the process's end returns them.
static std::map<Device, std::unique_ptr<CachingAllocator>>& devices() {
  static auto* d = new std::map<Device, std::unique_ptr<CachingAllocator>>;
  return *d;
}

static std::map<DeviceType, CachingAllocator::MemoryProvider>& providers() {
  static std::map<DeviceType, CachingAllocator::MemoryProvider> p;
  return p;
}

void CachingAllocator::register_device(Device device, DeviceMemory& memory) {
  std::lock_guard<std::mutex> lock(devices_mu());
  if (device == kCpu || devices().count(device)) throw Error("device " + device.str() + " is already registered");
  devices()[device] = std::make_unique<CachingAllocator>(device, memory);
}

void CachingAllocator::register_device_type(DeviceType type, MemoryProvider provider) {
  std::lock_guard<std::mutex> lock(devices_mu());
  if (type == DeviceType::kCpu || providers().count(type))
    throw Error("device type " + Device{type, 0}.str() + " is already registered");
  providers()[type] = std::move(provider);
}

CachingAllocator& CachingAllocator::of(Device device) {
  if (device == kCpu) return global();
  std::lock_guard<std::mutex> lock(devices_mu());
  auto it = devices().find(device);
  if (it != devices().end()) return *it->second;
  auto provider = providers().find(device.type);
  if (provider == providers().end())
    throw UnsupportedError("device " + device.str() + " is not registered" +
                           (device.type == DeviceType::kCuda ? ": this onnxtrain was built without CUDA" : ""));
  DeviceMemory& memory = provider->second(device.index);  // throws for an index the type lacks
  return *(devices()[device] = std::make_unique<CachingAllocator>(device, memory));
}

QueueScope::QueueScope(Device device, void* queue) {
  if (device == kCpu) return;
  memory_ = &CachingAllocator::of(device).memory();
  before_ = memory_->queue();
  memory_->set_queue(queue);
}

QueueScope::~QueueScope() {
  if (memory_) memory_->set_queue(before_);
}

MemoryStats memory_stats(Device device) { return CachingAllocator::of(device).stats(); }
void reset_peak_stats(Device device) { CachingAllocator::of(device).reset_peaks(); }
void set_memory_limit(int64_t bytes, Device device) { CachingAllocator::of(device).set_limit(bytes); }
void empty_cache(Device device) { CachingAllocator::of(device).empty_cache(); }

}  // namespace onnxtrain
