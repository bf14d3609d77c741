// CUB's block reduction as the warp emulation (warp_emulation.h) runs it, in place of CUB's own for the emulated
// tests that include a kernel using it: every thread's value through the block's shared storage, combined in thread
// order. CUB hands the result to thread 0 alone; here every thread gets it (the kernels read thread 0's).
#pragma once

namespace cub {

template <typename T, int kThreads>
class BlockReduce {
 public:
  struct TempStorage {
    T v[kThreads];
  };
  explicit BlockReduce(TempStorage& s) : s_(s) {}
  template <typename Op>
  T Reduce(T v, Op op) {
    s_.v[threadIdx.x] = v;
    __syncthreads();
    T r = s_.v[0];
    for (int i = 1; i < kThreads; ++i) r = op(r, s_.v[i]);
    __syncthreads();  // (every thread has read the storage: it may be used again)
    return r;
  }

 private:
  TempStorage& s_;
};

}  // namespace cub
