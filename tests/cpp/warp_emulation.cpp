// The warp emulation (warp_emulation.h): a block's threads as fibers, barriers among them and among each warp's 32,
// and the exchanges of the warp-wide instructions (shuffles, ldmatrix, products) through them.
#ifdef ONNXTRAIN_WITH_CUDA
#include "warp_emulation.h"

#include <sys/mman.h>
#include <ucontext.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <vector>

#include "kernels/cuda/async_copy.cuh"
#include "kernels/cuda/warp_mma.cuh"

#if defined(__SANITIZE_ADDRESS__)
#define EMULATION_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMULATION_ASAN 1
#endif
#endif
#ifdef EMULATION_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

thread_local EmulatedIndex threadIdx, blockIdx, blockDim, gridDim;

namespace onnxtrain {
namespace {

struct Copy {
  void* to;
  const void* from;
  int bytes;
};

// Threads arrive; once `expected` have, the phase ends and they all go on.
struct Barrier {
  explicit Barrier(unsigned n) : expected(n) {}
  unsigned expected, arrived = 0;
  uint64_t phase = 0;
};

constexpr size_t kStackBytes = size_t(256) << 10;

// A block's threads are fibers of the host thread that runs the block: each runs until it waits at a barrier (or
// ends), then the next one that can go on runs. Switching among fibers costs no system's scheduling, which threads
// of the host waiting on each other at every barrier did (most of the emulated tests' time went there). Each switch
// is announced to AddressSanitizer (its interceptor of swapcontext still warns, once, that it supports it in part).
struct Fiber {
  ucontext_t context;
  char* stack = nullptr;
  bool done = false;
  const Barrier* waiting = nullptr;        // the barrier it waits at, in `phase`
  uint64_t phase = 0;
  std::vector<Copy> issued;                // cp.async's since its last commit
  std::deque<std::vector<Copy>> in_flight;  // its committed groups, oldest first
  void* fake_stack = nullptr;               // (AddressSanitizer's, while it is switched out)

  // About to run the kernel from its start on this fiber's stack.
  void begin();
};

struct Scheduler {
  ucontext_t context;
  const void* stack_bottom = nullptr;  // the host thread's stack (AddressSanitizer is told on each switch)
  size_t stack_size = 0;
  Fiber* current = nullptr;
  const std::function<void()>* kernel = nullptr;
};
Scheduler scheduler;

void start_switch(void** fake_stack, const void* bottom, size_t size) {
#ifdef EMULATION_ASAN
  __sanitizer_start_switch_fiber(fake_stack, bottom, size);
#endif
}
void finish_switch(void* fake_stack, const void** bottom, size_t* size) {
#ifdef EMULATION_ASAN
  __sanitizer_finish_switch_fiber(fake_stack, bottom, size);
#endif
}

// From the running fiber back to the scheduler; returns when the scheduler switches to it again.
void yield() {
  Fiber& f = *scheduler.current;
  start_switch(&f.fake_stack, scheduler.stack_bottom, scheduler.stack_size);
  swapcontext(&f.context, &scheduler.context);
  finish_switch(f.fake_stack, &scheduler.stack_bottom, &scheduler.stack_size);
}

void fiber_main() {
  Fiber& f = *scheduler.current;
  finish_switch(nullptr, &scheduler.stack_bottom, &scheduler.stack_size);
  (*scheduler.kernel)();
  f.done = true;
  start_switch(nullptr, scheduler.stack_bottom, scheduler.stack_size);  // (this fiber's stack ends here)
  setcontext(&scheduler.context);
}

void Fiber::begin() {
#ifdef EMULATION_ASAN
  ASAN_UNPOISON_MEMORY_REGION(stack, kStackBytes);  // (what the last block's frames left)
#endif
  done = false;
  waiting = nullptr;
  issued.clear();
  in_flight.clear();
  getcontext(&context);
  context.uc_stack = {.ss_sp = stack, .ss_flags = 0, .ss_size = kStackBytes};
  context.uc_link = nullptr;
  makecontext(&context, fiber_main, 0);
}

void arrive_and_wait(Barrier& b) {
  if (++b.arrived == b.expected) {
    b.arrived = 0;
    ++b.phase;
    return;
  }
  scheduler.current->waiting = &b;
  scheduler.current->phase = b.phase;
  yield();
}

struct Warp {
  Barrier sync{32};
  float shuffled[32];
  int exchanged[32];  // __shfl_sync's and __ballot_sync's
  uint32_t a[32][4], b[32][2];
  const uint16_t* rows[32];  // ldmatrix's
};

struct Block {
  explicit Block(unsigned threads) : all(threads) {
    for (unsigned w = 0; w < threads / 32; ++w) warps.push_back(std::make_unique<Warp>());
  }
  Barrier all;
  int votes = 0;  // __syncthreads_or's
  std::vector<std::unique_ptr<Warp>> warps;
};

Block* running = nullptr;  // the block whose threads run

Warp& warp() { return *running->warps[threadIdx.x / 32]; }

float from_f16(uint16_t bits) {
  __half_raw raw;
  raw.x = bits;
  return __half2float(__half(raw));
}
float from_bf16(uint16_t bits) {
  const uint32_t w = uint32_t(bits) << 16;
  float f;
  std::memcpy(&f, &w, 4);
  return f;
}

// c += A B, each lane's part of A, B and C as PTX's m16n8k16 lays them out (warp_mma.cuh).
template <float (*Decode)(uint16_t)>
void product(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  Warp& w = warp();
  const int lane = int(threadIdx.x % 32), g = lane / 4, t = lane % 4;
  std::memcpy(w.a[lane], a, sizeof a);
  w.b[lane][0] = b0;
  w.b[lane][1] = b1;
  arrive_and_wait(w.sync);
  auto half = [](uint32_t reg, int k) { return uint16_t(k % 2 ? reg >> 16 : reg & 0xffff); };
  auto at_a = [&](int row, int k) { return Decode(half(w.a[row % 8 * 4 + k % 8 / 2][row / 8 + 2 * (k / 8)], k)); };
  auto at_b = [&](int k, int n) { return Decode(half(w.b[n * 4 + k % 8 / 2][k / 8], k)); };
  for (int i = 0; i < 4; ++i) {
    const int row = g + 8 * (i / 2), col = 2 * t + i % 2;
    float s = c[i];
    for (int k = 0; k < 16; ++k) s += at_a(row, k) * at_b(k, col);
    c[i] = s;
  }
  arrive_and_wait(w.sync);
}

}  // namespace

namespace kernels::cuda {

void copy16_async(void* shared, const void* global, int bytes) {
  scheduler.current->issued.push_back({shared, global, bytes});
}

void commit_copies() {
  Fiber& f = *scheduler.current;
  f.in_flight.push_back(std::move(f.issued));
  f.issued.clear();
}

void wait_copies(int pending) {
  for (auto& groups = scheduler.current->in_flight; int(groups.size()) > pending; groups.pop_front())
    for (const Copy& c : groups.front()) {
      std::memcpy(c.to, c.from, size_t(c.bytes));
      std::memset(static_cast<char*>(c.to) + c.bytes, 0, size_t(16 - c.bytes));
    }
}

void ldmatrix_x4(uint32_t (&r)[4], const uint16_t* row, bool trans) {
  if (reinterpret_cast<uintptr_t>(row) % 16) __builtin_trap();  // a GPU faults on a misaligned row: so does the host
  Warp& w = warp();
  const int lane = int(threadIdx.x % 32), g = lane / 4, t = lane % 4;
  w.rows[lane] = row;
  arrive_and_wait(w.sync);
  for (int i = 0; i < 4; ++i) {
    const uint16_t* const* m = w.rows + 8 * i;  // matrix i's rows
    r[i] = trans ? join(m[2 * t][g], m[2 * t + 1][g]) : join(m[g][2 * t], m[g][2 * t + 1]);
  }
  arrive_and_wait(w.sync);
}
void mma_f16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) { product<from_f16>(c, a, b0, b1); }
void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) { product<from_bf16>(c, a, b0, b1); }
}  // namespace kernels::cuda

void testing::emulate(EmulatedIndex grid, unsigned threads, const std::function<void()>& kernel) {
  std::vector<Fiber> fibers(threads);
  for (Fiber& f : fibers) {
    void* stack = mmap(nullptr, kStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (stack == MAP_FAILED) std::abort();
    f.stack = static_cast<char*>(stack);
  }
  scheduler.kernel = &kernel;
  for (unsigned by = 0; by < grid.y; ++by)
    for (unsigned bx = 0; bx < grid.x; ++bx) {
      Block block(threads);
      running = &block;
      blockIdx = {bx, by, 0};
      blockDim = {threads, 1, 1};
      gridDim = grid;
      for (Fiber& f : fibers) f.begin();
      // Each pass takes the threads in the other order, so that a read missing its barrier finds the bytes unwritten
      // whichever thread writes them.
      for (unsigned left = threads, pass = 0; left; ++pass) {
        bool ran = false;
        for (unsigned k = 0; k < threads; ++k) {
          const unsigned i = pass % 2 ? threads - 1 - k : k;
          Fiber& f = fibers[i];
          if (f.done || (f.waiting && f.waiting->phase == f.phase)) continue;
          f.waiting = nullptr;
          scheduler.current = &f;
          threadIdx = {i, 0, 0};
          void* fake_stack = nullptr;
          start_switch(&fake_stack, f.stack, kStackBytes);
          swapcontext(&scheduler.context, &f.context);
          finish_switch(fake_stack, nullptr, nullptr);
          left -= f.done;
          ran = true;
        }
        if (!ran) {  // (a GPU would hang)
          std::fprintf(stderr, "warp emulation: block (%u, %u): every thread left waits at a barrier that the others "
                               "never reach\n", bx, by);
          std::abort();
        }
      }
      scheduler.current = nullptr;
      running = nullptr;
    }
  for (Fiber& f : fibers) munmap(f.stack, kStackBytes);
}

}  // namespace onnxtrain

void __syncthreads() { onnxtrain::arrive_and_wait(onnxtrain::running->all); }

int __syncthreads_or(int predicate) {
  onnxtrain::Block& b = *onnxtrain::running;
  if (predicate) ++b.votes;
  onnxtrain::arrive_and_wait(b.all);
  const int any = b.votes > 0;
  onnxtrain::arrive_and_wait(b.all);  // every thread has read the votes
  if (threadIdx.x == 0) b.votes = 0;
  onnxtrain::arrive_and_wait(b.all);
  return any;
}

float atomicAdd(float* address, float v) { return std::atomic_ref<float>(*address).fetch_add(v); }
double atomicAdd(double* address, double v) { return std::atomic_ref<double>(*address).fetch_add(v); }

void __syncwarp(unsigned) { onnxtrain::arrive_and_wait(onnxtrain::warp().sync); }

float __shfl_xor_sync(unsigned, float v, int lane_mask) {
  onnxtrain::Warp& w = onnxtrain::warp();
  const unsigned lane = threadIdx.x % 32;
  w.shuffled[lane] = v;
  arrive_and_wait(w.sync);
  const float r = w.shuffled[lane ^ unsigned(lane_mask)];
  arrive_and_wait(w.sync);
  return r;
}

int __shfl_sync(unsigned, int v, int from) {
  onnxtrain::Warp& w = onnxtrain::warp();
  w.exchanged[threadIdx.x % 32] = v;
  arrive_and_wait(w.sync);
  const int r = w.exchanged[from % 32];
  arrive_and_wait(w.sync);
  return r;
}

unsigned __ballot_sync(unsigned, int predicate) {
  onnxtrain::Warp& w = onnxtrain::warp();
  w.exchanged[threadIdx.x % 32] = predicate != 0;
  arrive_and_wait(w.sync);
  unsigned r = 0;
  for (unsigned lane = 0; lane < 32; ++lane) r |= unsigned(w.exchanged[lane]) << lane;
  arrive_and_wait(w.sync);
  return r;
}
#endif
