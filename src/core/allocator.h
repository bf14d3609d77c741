// A small size-keyed caching allocator whose statistics are public API, one per device. Each block it reserves from
// the device's memory (a segment: as large as a large request, kSmallSegment for small ones) serves requests whole,
// or split: a request takes the best-fitting free block of its pool, whole when it is at most an eighth larger,
// else its front, the rest staying free beside it (neighbours that are free again merge). A segment goes back to
// the system only whole: a block in use keeps the free rest of its segment for the next request (a step's
// gradients, held by PyTorch, keep theirs for the next step). It never holds more than it has had to: on a miss
// for a large request, whole free segments are returned to the system until the new one fits under the highest
// allocated total since the last trim(), so the bytes it reserves (cached) peak where the allocated bytes peak
// (within the small segments' few MiB), and a step's process memory is the planned peak, not the planned peak plus
// fragments of other sizes; and a step that repeats the last one's requests reuses its segments instead of
// returning and reserving them again (on the host, faulting fresh pages in each time).
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <unordered_map>
#include <optional>
#include <thread>

#include "onnxtrain/device.h"
#include "onnxtrain/memory_stats.h"

namespace onnxtrain {

class CachingAllocator {
 public:
  static constexpr size_t kAlignment = 64;
  // Requests under kSmall are small: they are carved from segments of kSmallSegment of their own, so that a small
  // block in use (a loss kept, a small buffer) never holds a large segment's free rest.
  static constexpr size_t kSmall = size_t(1) << 20, kSmallSegment = size_t(2) << 20;
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
  // empty_cache(), and a new high-water mark from here.
  void trim();
  // trim() once `seconds` have passed with nothing allocated (at once for 0), on a thread of the allocator's own:
  // what a session calls at the end of each step (SessionOptions::release_cache_after). A step that follows sooner
  // reuses the cache: on a virtual machine whose host takes back the pages a guest frees, faulting them in again
  // costs about 2 ms per MiB. Memory idle longer (a pause, an evaluation, the end of training) goes back.
  void trim_when_idle(double seconds);
  // Each observer is called (under the allocator's lock: it must not allocate from this allocator) with every
  // block handed out (+rounded bytes) and taken back (-rounded bytes), on the thread that allocates or frees it,
  // until removed by the id add_observer returned. Several can watch one allocator at once.
  using Observer = std::function<void(const void* block, int64_t bytes)>;
  int add_observer(Observer observer);
  void remove_observer(int id);

  // The host's allocator.
  static CachingAllocator& global();
  // The allocator of a device; kCpu's is global(). Another device's is registered once, before use: by itself, or
  // made at its first use from the memory its type's provider gives for its index.
  static CachingAllocator& of(Device device);
  static void register_device(Device device, DeviceMemory& memory);
  // The memory of each index of a device type (the provider throws UnsupportedError for an index it lacks).
  using MemoryProvider = std::function<DeviceMemory&(int index)>;
  static void register_device_type(DeviceType type, MemoryProvider provider);

 private:
  // A block of a segment, in the segment's address order; free or serving one request.
  struct Block {
    char* ptr;
    size_t size;
    size_t requested = 0;  // the rounded request it serves (0: free)
    Block* prev = nullptr;
    Block* next = nullptr;
    std::multimap<size_t, Block*>::iterator free_at;  // its entry in its pool, while free (requested 0)
    bool small = false;                                 // of a small segment (pool 1) or a large one (pool 0)
    bool whole() const { return !prev && !next; }       // the whole segment: what may go back to the system
  };
  void make_free(Block* b);  // with mu_ held: merges b with free neighbours, then lists it free
  void take(Block* b);       // with mu_ held: b no longer listed free
  void release(Block* b);    // with mu_ held: a whole free segment back to the system
  void note_queue();         // with mu_ held: the calling thread's queue, among those blocks were taken or freed on
  // With mu_ held: a segment of `bytes` reserved (for a large one, after release_beyond_high_water), as one block.
  Block* new_segment(size_t bytes, bool small);
  void update_peaks();
  void trim_locked();
  void idle_loop();            // the thread trim_when_idle starts
  void release_free_blocks();  // with mu_ held
  // With mu_ held, before reserving `bytes` more: releases whole free segments, largest first, until the cache fits
  // under the high-water mark (or holds no whole free segment).
  void release_beyond_high_water(size_t bytes);
  Device device_;
  DeviceMemory& memory_;
  mutable std::mutex mu_;
  std::multimap<size_t, Block*> free_blocks_[2];  // the free blocks of large (0) and small (1) segments, by size
  std::unordered_map<void*, Block*> used_;      // by address
  MemoryStats s_;
  int64_t high_water_ = 0;  // the highest allocated total since the last trim()
  // The queue every block was taken and freed on, while there has been one (else `queues_` is false): a segment then
  // goes back in that queue's order (DeviceMemory::release_in_queue_order), without waiting for the device.
  std::optional<void*> queue_;
  bool queues_ = false;
  std::map<int, Observer> observers_;
  int next_observer_ = 0;
  // trim_when_idle's: when to trim, if nothing is allocated before (num_allocs still idle_allocs_).
  std::condition_variable idle_cv_;
  std::thread idle_thread_;
  std::optional<std::chrono::steady_clock::time_point> idle_deadline_;
  int64_t idle_allocs_ = 0;
  bool stopping_ = false;
};

}  // namespace onnxtrain
