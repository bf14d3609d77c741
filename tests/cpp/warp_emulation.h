// CUDA's execution model on the host, to test warp-level kernels (kernels/cuda/warp_mma.cuh's tensor-core products)
// where no GPU is: a block's threads are fibers of one host thread (each runs until it waits at a barrier),
// __syncthreads a barrier among them, a warp's shuffles, votes, ldmatrix and products exchanges among its 32 threads
// (by PTX's fragment layouts; the products in float32), a cp.async copy made only once a wait covers its group (a
// read before the wait sees the old bytes), and float atomics. Blocks run one after another, so a kernel's
// __shared__ arrays are static ones. Included first, in a test file of its own: it defines the CUDA qualifiers as
// the host compiler is to take them.
#pragma once
#ifdef __CUDACC__
#error "the warp emulation is compiled by the host compiler"
#endif
#define __device__
#define __global__
#define __shared__ static
#define __launch_bounds__(...)

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <new>

struct EmulatedIndex {
  unsigned x = 0, y = 0, z = 0;
};
extern thread_local EmulatedIndex threadIdx, blockIdx, blockDim, gridDim;
void __syncthreads();
int __syncthreads_or(int predicate);
void __syncwarp(unsigned mask = 0xffffffffu);  // (the whole warp's)
float __shfl_xor_sync(unsigned mask, float v, int lane_mask);
int __shfl_sync(unsigned mask, int v, int lane);
unsigned __ballot_sync(unsigned mask, int predicate);
inline int __ffs(int x) { return x ? __builtin_ctz(unsigned(x)) + 1 : 0; }
float atomicAdd(float* address, float v);  // (the old value, as CUDA's: the block's threads run at once)
double atomicAdd(double* address, double v);
inline float __expf(float x) { return std::exp(x); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }
using std::isfinite;  // (CUDA declares it in the global namespace)
inline float rsqrtf(float x) { return 1.f / std::sqrt(x); }

namespace onnxtrain::testing {

// Runs kernel() on a grid of `grid` blocks (x, then y) of `threads` threads (a multiple of 32), one block after
// another.
void emulate(EmulatedIndex grid, unsigned threads, const std::function<void()>& kernel);
inline void emulate(unsigned blocks, unsigned threads, const std::function<void()>& kernel) {
  emulate(EmulatedIndex{blocks, 1, 1}, threads, kernel);
}

// n elements and one past them, aligned to 64 bytes as the plan's buffers are (the kernels' packs of 16 or 32 bytes
// are loaded as aligned), copied from `from` where given.
template <typename T>
struct Aligned {
  explicit Aligned(int64_t n, const T* from = nullptr) : p(new (std::align_val_t(64)) T[size_t(n) + 1]), size(n + 1) {
    if (from) std::copy(from, from + n, p);
  }
  ~Aligned() { ::operator delete[](p, std::align_val_t(64)); }
  Aligned(const Aligned&) = delete;
  Aligned& operator=(const Aligned&) = delete;
  T* p;
  int64_t size;
};

}  // namespace onnxtrain::testing
