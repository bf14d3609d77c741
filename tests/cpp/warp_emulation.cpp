// The warp emulation (warp_emulation.h): barriers among a block's host threads and among each warp's 32, and the
// exchanges of the warp-wide instructions (shuffles, ldmatrix, products) through them.
#ifdef ONNXTRAIN_WITH_CUDA
#include "warp_emulation.h"

#include <atomic>
#include <barrier>
#include <cstring>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "kernels/cuda/async_copy.cuh"
#include "kernels/cuda/warp_mma.cuh"

thread_local EmulatedIndex threadIdx, blockIdx, blockDim, gridDim;

namespace onnxtrain {
namespace {

struct Warp {
  std::barrier<> sync{32};
  float shuffled[32];
  int exchanged[32];  // __shfl_sync's and __ballot_sync's
  uint32_t a[32][4], b[32][2];
  const uint16_t* rows[32];  // ldmatrix's
};

struct Block {
  explicit Block(unsigned threads) : all(threads) {
    for (unsigned w = 0; w < threads / 32; ++w) warps.push_back(std::make_unique<Warp>());
  }
  std::barrier<> all;
  std::atomic<int> votes{0};  // __syncthreads_or's
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
  w.sync.arrive_and_wait();
  auto half = [](uint32_t reg, int k) { return uint16_t(k % 2 ? reg >> 16 : reg & 0xffff); };
  auto at_a = [&](int row, int k) { return Decode(half(w.a[row % 8 * 4 + k % 8 / 2][row / 8 + 2 * (k / 8)], k)); };
  auto at_b = [&](int k, int n) { return Decode(half(w.b[n * 4 + k % 8 / 2][k / 8], k)); };
  for (int i = 0; i < 4; ++i) {
    const int row = g + 8 * (i / 2), col = 2 * t + i % 2;
    float s = c[i];
    for (int k = 0; k < 16; ++k) s += at_a(row, k) * at_b(k, col);
    c[i] = s;
  }
  w.sync.arrive_and_wait();
}

}  // namespace

namespace kernels::cuda {
namespace {
struct Copy {
  void* to;
  const void* from;
  int bytes;
};
thread_local std::vector<Copy> issued;                // since the thread's last commit
thread_local std::deque<std::vector<Copy>> in_flight;  // its committed groups, oldest first
}  // namespace

void copy16_async(void* shared, const void* global, int bytes) { issued.push_back({shared, global, bytes}); }

void commit_copies() {
  in_flight.push_back(std::move(issued));
  issued.clear();
}

void wait_copies(int pending) {
  for (; int(in_flight.size()) > pending; in_flight.pop_front())
    for (const Copy& c : in_flight.front()) {
      std::memcpy(c.to, c.from, size_t(c.bytes));
      std::memset(static_cast<char*>(c.to) + c.bytes, 0, size_t(16 - c.bytes));
    }
}

void ldmatrix_x4(uint32_t (&r)[4], const uint16_t* row, bool trans) {
  if (reinterpret_cast<uintptr_t>(row) % 16) __builtin_trap();  // a GPU faults on a misaligned row: so does the host
  Warp& w = warp();
  const int lane = int(threadIdx.x % 32), g = lane / 4, t = lane % 4;
  w.rows[lane] = row;
  w.sync.arrive_and_wait();
  for (int i = 0; i < 4; ++i) {
    const uint16_t* const* m = w.rows + 8 * i;  // matrix i's rows
    r[i] = trans ? join(m[2 * t][g], m[2 * t + 1][g]) : join(m[g][2 * t], m[g][2 * t + 1]);
  }
  w.sync.arrive_and_wait();
}
void mma_f16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) { product<from_f16>(c, a, b0, b1); }
void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) { product<from_bf16>(c, a, b0, b1); }
}  // namespace kernels::cuda

void testing::emulate(EmulatedIndex grid, unsigned threads, const std::function<void()>& kernel) {
  for (unsigned by = 0; by < grid.y; ++by)
    for (unsigned bx = 0; bx < grid.x; ++bx) {
      Block block(threads);
      running = &block;
      std::vector<std::thread> pool;
      for (unsigned i = 0; i < threads; ++i)
        pool.emplace_back([&, i] {
          threadIdx = {i, 0, 0};
          blockIdx = {bx, by, 0};
          blockDim = {threads, 1, 1};
          gridDim = grid;
          kernel();
        });
      for (auto& th : pool) th.join();
      running = nullptr;
    }
}

}  // namespace onnxtrain

void __syncthreads() { onnxtrain::running->all.arrive_and_wait(); }

int __syncthreads_or(int predicate) {
  onnxtrain::Block& b = *onnxtrain::running;
  if (predicate) b.votes.fetch_add(1);
  b.all.arrive_and_wait();
  const int any = b.votes.load() > 0;
  b.all.arrive_and_wait();  // every thread has read the votes
  if (threadIdx.x == 0) b.votes.store(0);
  b.all.arrive_and_wait();
  return any;
}

float atomicAdd(float* address, float v) { return std::atomic_ref<float>(*address).fetch_add(v); }
double atomicAdd(double* address, double v) { return std::atomic_ref<double>(*address).fetch_add(v); }

void __syncwarp(unsigned) { onnxtrain::warp().sync.arrive_and_wait(); }

float __shfl_xor_sync(unsigned, float v, int lane_mask) {
  onnxtrain::Warp& w = onnxtrain::warp();
  const unsigned lane = threadIdx.x % 32;
  w.shuffled[lane] = v;
  w.sync.arrive_and_wait();
  const float r = w.shuffled[lane ^ unsigned(lane_mask)];
  w.sync.arrive_and_wait();
  return r;
}

int __shfl_sync(unsigned, int v, int from) {
  onnxtrain::Warp& w = onnxtrain::warp();
  w.exchanged[threadIdx.x % 32] = v;
  w.sync.arrive_and_wait();
  const int r = w.exchanged[from % 32];
  w.sync.arrive_and_wait();
  return r;
}

unsigned __ballot_sync(unsigned, int predicate) {
  onnxtrain::Warp& w = onnxtrain::warp();
  w.exchanged[threadIdx.x % 32] = predicate != 0;
  w.sync.arrive_and_wait();
  unsigned r = 0;
  for (unsigned lane = 0; lane < 32; ++lane) r |= unsigned(w.exchanged[lane]) << lane;
  w.sync.arrive_and_wait();
  return r;
}
#endif
