// Who takes a row in the norms' row kernels (layer_norm_kernels.cuh, rms_norm_kernels.cuh): a warp, for rows of up
// to kWarpRowMax elements (kThreads / 32 rows a block, the row's sums by shuffles: no barrier), or the whole block for
// longer ones (block_reduce.cuh's reduction). A block a row had spent GPT-2's rows of 768 on barriers, three elements
// a thread between them: LayerNorm 86 us for 16 x 1024 rows on an H200, where the bytes take about 20.
#pragma once
#include "kernels/cuda/block_reduce.cuh"

namespace onnxtrain::kernels::cuda {

constexpr int64_t kWarpRowMax = 2048;

struct WarpRows {
  static constexpr int kPerBlock = kThreads / 32, kStride = 32;
  __device__ static int64_t row() { return int64_t(blockIdx.x) * kPerBlock + threadIdx.x / 32; }
  __device__ static int first() { return int(threadIdx.x % 32); }
  __device__ static float sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
  }
};

struct BlockRows {
  static constexpr int kPerBlock = 1, kStride = kThreads;
  __device__ static int64_t row() { return blockIdx.x; }
  __device__ static int first() { return int(threadIdx.x); }
  __device__ static float sum(float v) {
    __shared__ BlockReduce::TempStorage tmp;
    __shared__ float shared;
    return block_all_reduce(v, SumOp(), tmp, &shared);
  }
};

// Launches kernel<Rows> for `rows` rows of n elements (n under 2^31, else launch_error naming it) as `launch(rows
// policy, blocks)`.
template <typename Launch>
void launch_norm_rows(int64_t rows, int64_t n, const char* kernel, Launch&& launch) {
  if (n > 0x7fffffff) launch_error(std::string(kernel) + ": rows of more than 2^31 elements");
  if (n <= kWarpRowMax) {
    const int64_t blocks = (rows + WarpRows::kPerBlock - 1) / WarpRows::kPerBlock;
    check_rows(blocks, kernel);
    launch(WarpRows{}, unsigned(blocks));
  } else {
    check_rows(rows, kernel);
    launch(BlockRows{}, unsigned(rows));
  }
}

}  // namespace onnxtrain::kernels::cuda
