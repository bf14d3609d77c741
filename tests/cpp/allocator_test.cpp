#include "core/allocator.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "onnxtrain/error.h"

using onnxtrain::CachingAllocator;

constexpr int64_t kMiB = int64_t(1) << 20;

TEST(Allocator, StatisticsFollowAllocationsAndFrees) {
  CachingAllocator a;
  void* p = a.allocate(1000);  // rounds to 1024; small: carved from a small segment
  void* q = a.allocate(64);
  auto s = a.stats();
  EXPECT_EQ(s.allocated, 1024 + 64);
  EXPECT_EQ(s.cached, int64_t(CachingAllocator::kSmallSegment));
  EXPECT_EQ(q, static_cast<char*>(p) + 1024);
  EXPECT_EQ(s.num_allocs, 2);
  a.free(p);
  s = a.stats();
  EXPECT_EQ(s.allocated, 64);
  EXPECT_EQ(s.peak_allocated, 1024 + 64);
  EXPECT_EQ(s.inactive, int64_t(CachingAllocator::kSmallSegment) - 64);
  // A cached block is reused: no new memory is reserved.
  void* r = a.allocate(900);
  EXPECT_EQ(r, p);
  EXPECT_EQ(a.stats().cached, int64_t(CachingAllocator::kSmallSegment));
  a.free(q);
  a.free(r);
  a.reset_peaks();
  EXPECT_EQ(a.stats().peak_allocated, 0);
  a.empty_cache();
  EXPECT_EQ(a.stats().cached, 0);
}

TEST(Allocator, LimitRaisesTypedErrorNamingTheRequest) {
  CachingAllocator a;
  a.set_limit(4096);
  void* p = a.allocate(4000);
  try {
    a.allocate(1000);
    FAIL() << "expected OutOfMemoryError";
  } catch (const onnxtrain::OutOfMemoryError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("request of 0 MiB (1024 bytes)"), std::string::npos) << m;
    EXPECT_NE(m.find("4032 bytes"), std::string::npos) << m;
    EXPECT_NE(m.find("limit"), std::string::npos) << m;
  }
  a.free(p);
  EXPECT_NO_THROW(a.free(a.allocate(1000)));
}

// Blocks of one size freed, then requests of another that they cannot serve: without the high-water rule the
// cache would hold both sets (3 x 2 MiB idle beside 3 x 8 MiB in use); with it, it never reserves past the highest
// allocated total.
TEST(Allocator, CachedBytesPeakWhereAllocatedBytesPeak) {
  CachingAllocator a;
  void* small[3];
  for (auto& p : small) p = a.allocate(2 * kMiB);
  for (auto* p : small) a.free(p);
  EXPECT_EQ(a.stats().cached, 3 * 2 * kMiB);  // (idle, but under the high water of 3 x 2 MiB)
  void* big[3];
  for (auto& p : big) p = a.allocate(8 * kMiB);
  auto s = a.stats();
  EXPECT_EQ(s.peak_cached, s.peak_allocated);
  EXPECT_EQ(s.cached, 3 * 8 * kMiB);
  for (auto* p : big) a.free(p);
  // A block that fits is reused as before, whatever the high water.
  void* again = a.allocate(7 * kMiB + kMiB / 2);
  EXPECT_EQ(a.stats().cached, 3 * 8 * kMiB);
  a.free(again);
  // trim() returns every free block and starts a new high water: the next step reserves only what it uses.
  a.trim();
  EXPECT_EQ(a.stats().cached, 0);
  void* p = a.allocate(2 * kMiB);
  void* q = a.allocate(2 * kMiB);
  a.free(p);
  void* r = a.allocate(4 * kMiB);  // a miss: the idle 2 MiB goes first, the high water (4 MiB) being what it may hold
  s = a.stats();
  EXPECT_EQ(s.cached, 2 * kMiB + 4 * kMiB);
  a.free(q);
  a.free(r);
}

// Host blocks of 1 MiB and more are mapped and unmapped (what the allocator trims leaves the process); smaller
// ones come from malloc. Both are writable through their whole size and released without a trace.
TEST(Allocator, HostMemoryServesSmallAndMappedBlocks) {
  onnxtrain::DeviceMemory& host = onnxtrain::host_memory();
  for (size_t bytes : {size_t(64), size_t(1) << 20, (size_t(3) << 20) + 64}) {
    auto* p = static_cast<unsigned char*>(host.reserve(bytes, CachingAllocator::kAlignment));
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % CachingAllocator::kAlignment, 0u);
    p[0] = 1, p[bytes - 1] = 2;
    EXPECT_EQ(p[0] + p[bytes - 1], 3);
    host.release(p);
  }
}

// trim_when_idle: the free blocks stay while the cache may still be reused, go back to the system once nothing has
// been allocated for the time given, and stay if an allocation comes first (a step under way).
TEST(Allocator, TrimWhenIdleReturnsOnlyAnIdleCache) {
  using namespace std::chrono_literals;
  auto wait_for_empty = [](CachingAllocator& a) {
    for (int i = 0; i < 500 && a.stats().cached != 0; ++i) std::this_thread::sleep_for(10ms);
    return a.stats().cached;
  };
  CachingAllocator a;
  a.free(a.allocate(2 * kMiB));
  a.trim_when_idle(60);
  EXPECT_EQ(a.stats().cached, 2 * kMiB);  // (60 s from now)
  a.trim_when_idle(0.01);
  EXPECT_EQ(wait_for_empty(a), 0);

  void* p = a.allocate(2 * kMiB);
  a.free(a.allocate(2 * kMiB));
  a.free(p);
  a.trim_when_idle(1);
  p = a.allocate(2 * kMiB);  // the next step starts before the second passes
  std::this_thread::sleep_for(1500ms);
  EXPECT_EQ(a.stats().cached, 2 * 2 * kMiB);  // the free block kept
  a.free(p);
  a.trim_when_idle(0);  // at once
  EXPECT_EQ(a.stats().cached, 0);
}

// A free block more than an eighth larger than a request serves it by its front, the rest staying free in the same
// segment; parts freed merge again, so the next step finds the whole block; only whole free segments go back. Small
// requests come from small segments of their own: a small block in use never holds a large segment.
TEST(Allocator, LargerBlocksAreSplitAndMergeAgain) {
  CachingAllocator a;
  const int64_t size = 4 * kMiB;
  char* whole = static_cast<char*>(a.allocate(size));
  a.free(whole);
  void* p = a.allocate(size / 4);
  void* q = a.allocate(size / 4);
  EXPECT_EQ(p, whole);
  EXPECT_EQ(q, whole + size / 4);
  EXPECT_EQ(a.stats().cached, size) << "no new memory";
  EXPECT_EQ(a.stats().allocated, size / 2);
  void* tiny = a.allocate(64);
  EXPECT_EQ(a.stats().cached, size + int64_t(CachingAllocator::kSmallSegment)) << "a small segment";
  a.trim();
  EXPECT_EQ(a.stats().cached, size + int64_t(CachingAllocator::kSmallSegment)) << "segments in use stay";
  a.free(q);
  void* r = a.allocate(size / 2);  // the freed quarter and the free half after it merged
  EXPECT_EQ(r, whole + size / 4);
  a.free(p);
  a.free(r);
  EXPECT_EQ(a.allocate(size), whole);  // all merged again
  a.free(whole);
  a.trim();
  EXPECT_EQ(a.stats().cached, int64_t(CachingAllocator::kSmallSegment)) << "the small block holds its own segment";
  a.free(tiny);
  a.trim();
  EXPECT_EQ(a.stats().cached, 0);
  EXPECT_EQ(a.stats().allocated, 0);
}

// A memory that counts how its blocks go back: in queue order, or after waiting for the device.
struct QueuedMemory : onnxtrain::DeviceMemory {
  void* reserve(size_t bytes, size_t) override { return std::malloc(bytes); }
  void release(void* block) override {
    ++waited;
    std::free(block);
  }
  void release_in_queue_order(void* block) override {
    ++in_order;
    std::free(block);
  }
  void copy_from_host(void*, const void*, size_t) override {}
  void copy_to_host(void*, const void*, size_t) override {}
  bool host_readable() const override { return true; }
  void* queue() const override { return current; }
  void set_queue(void* q) override { current = q; }
  void* current = nullptr;
  int waited = 0, in_order = 0;
};

// While every block has been taken and freed on one queue, a trim hands segments back in that queue's order (no
// wait for the device: a CUDA device's segments go back to PyTorch's allocator every step); once a block has been
// taken or freed on another, or from another queue than that one, segments go back after the device's work.
TEST(Allocator, SegmentsGoBackInQueueOrderWhileOneQueueUsedThem) {
  QueuedMemory memory;
  int queues[2];
  memory.current = &queues[0];
  {
    CachingAllocator a(onnxtrain::Device{onnxtrain::DeviceType::kCuda, 7}, memory);
    a.free(a.allocate(2 * kMiB));
    a.free(a.allocate(64));
    a.trim();
    EXPECT_EQ(memory.in_order, 2);
    EXPECT_EQ(memory.waited, 0);
    a.free(a.allocate(2 * kMiB));
    memory.current = &queues[1];  // (a trim from another queue)
    a.trim();
    EXPECT_EQ(memory.waited, 1);
    memory.current = &queues[0];
    void* p = a.allocate(2 * kMiB);
    memory.current = &queues[1];
    a.free(p);  // (freed on another queue: its last use may be there)
    memory.current = &queues[0];
    a.trim();
    EXPECT_EQ(memory.waited, 2);
    EXPECT_EQ(memory.in_order, 2);
  }
}
