// Column sums over many rows, for the norms' scale and bias gradients and the reductions over leading dims (a
// Linear's bias gradient): the rows are cut into chunks (one block row of
// the grid each), a block sums 32 columns over its chunk, 8 lanes of rows at a time, and writes float32 partial sums
// into scratch; sum_chunks adds each column's partials in chunk order (deterministic) into the output. Thousands of
// rows thus spread over as many blocks as the GPU has room for instead of a block per 32 columns.
#pragma once
#include <algorithm>

#include "kernels/cuda/device_types.cuh"
#include "kernels/cuda/packed_map.cuh"

namespace onnxtrain::kernels::cuda {

constexpr int kColumns = 32, kRowLanes = kThreads / kColumns;
constexpr int64_t kRowsPerChunk = 256;

// How the rows are cut: `count` chunks (at most kRowChunks) of `rows` rows each (the last one shorter).
struct Chunks {
  int count;
  int64_t rows;
};
inline Chunks chunks_of(int64_t rows) {
  const int64_t count = std::clamp<int64_t>((rows + kRowsPerChunk - 1) / kRowsPerChunk, 1, kRowChunks);
  return {int(count), (rows + count - 1) / count};
}
inline dim3 chunk_grid(int64_t n, const Chunks& c) { return dim3(unsigned((n + kColumns - 1) / kColumns), c.count); }

// This thread's column and the rows of this block's chunk, [begin, end).
struct ChunkSpan {
  int tx, ty;
  int64_t j, begin, end;
};
__device__ __forceinline__ ChunkSpan chunk_span(int64_t rows, int64_t per_chunk) {
  const int tx = int(threadIdx.x % kColumns);
  const int64_t begin = int64_t(blockIdx.y) * per_chunk;
  return {tx, int(threadIdx.x / kColumns), int64_t(blockIdx.x) * kColumns + tx, begin,
          begin + per_chunk < rows ? begin + per_chunk : rows};
}

// The block's sum of v over its row lanes, written by the first lane to partial[blockIdx.y * n + j]; `lanes` is the
// block's shared [kRowLanes][kColumns + 1].
__device__ __forceinline__ void write_partial(float v, const ChunkSpan& s, float (*lanes)[kColumns + 1], float* partial,
                                              int64_t n) {
  lanes[s.ty][s.tx] = v;
  __syncthreads();
  if (s.ty != 0 || s.j >= n) return;
  for (int k = 1; k < kRowLanes; ++k) v += lanes[k][s.tx];
  partial[int64_t(blockIdx.y) * n + s.j] = v;
}

// The partial sums of x's columns (rows, n) over this block's chunk of rows.
template <typename T>
__global__ void column_partials_kernel(const T* x, float* partial, int64_t rows, int64_t n, int64_t per_chunk) {
  __shared__ float lanes[kRowLanes][kColumns + 1];
  const ChunkSpan s = chunk_span(rows, per_chunk);
  float a = 0;
  if (s.j < n)
    for (int64_t r = s.begin + s.ty; r < s.end; r += kRowLanes) a += to_float(x[r * n + s.j]);
  write_partial(a, s, lanes, partial, n);
}

// The wide kernels' partial sums: a thread sums kWideColumns columns read 16 bytes at a time (or 32: float32), a block
// 256 columns over its chunk, each column summed in the order of a thread a column (chunk_span's: a row lane's rows,
// then the row lanes in order), so the same bits; for 16-bit columns whose rows are whole 16-byte words (n a multiple
// of 8, the operands aligned to packs). (A thread a column had taken 21 us a Linear's bias gradient at GPT-2's
// 16 x 1024 rows on an H200, 2-byte reads a column, for 25 MB.)
constexpr int kWideColumns = 8, kWideBlockColumns = kColumns * kWideColumns;
static_assert(kWideBlockColumns == kThreads, "a column of a block's a thread, when its row lanes are added");
inline dim3 wide_chunk_grid(int64_t n, const Chunks& c) {
  return dim3(unsigned((n + kWideBlockColumns - 1) / kWideBlockColumns), c.count);
}
// This thread's first column (j) and the rows of this block's chunk, [begin, end).
__device__ __forceinline__ ChunkSpan wide_span(int64_t rows, int64_t per_chunk) {
  const int tx = int(threadIdx.x % kColumns);
  const int64_t begin = int64_t(blockIdx.y) * per_chunk;
  return {tx, int(threadIdx.x / kColumns), (int64_t(blockIdx.x) * kColumns + tx) * kWideColumns, begin,
          begin + per_chunk < rows ? begin + per_chunk : rows};
}
using WideLanes = float[kRowLanes][kWideBlockColumns + 1];
// Each thread's sums `a` of its columns: the row lanes added in order through `lanes`, a thread a column of the
// block's, into partial[blockIdx.y * n + column].
__device__ __forceinline__ void write_wide_partials(const float (&a)[kWideColumns], const ChunkSpan& s,
                                                    WideLanes& lanes, float* partial, int64_t n) {
#pragma unroll
  for (int k = 0; k < kWideColumns; ++k) lanes[s.ty][s.tx * kWideColumns + k] = a[k];
  __syncthreads();
  const int c = int(threadIdx.x);
  const int64_t j = int64_t(blockIdx.x) * kWideBlockColumns + c;
  if (j >= n) return;
  float v = lanes[0][c];
  for (int k = 1; k < kRowLanes; ++k) v += lanes[k][c];
  partial[int64_t(blockIdx.y) * n + j] = v;
}

// column_partials_kernel's partial sums, wide (above).
template <typename T>
__global__ void column_partials_wide_kernel(const T* x, float* partial, int64_t rows, int64_t n, int64_t per_chunk) {
  static_assert(sizeof(T) * kWideColumns == 16, "16 bytes a thread's row");
  __shared__ WideLanes lanes;
  const ChunkSpan s = wide_span(rows, per_chunk);
  float a[kWideColumns] = {};
  if (s.j < n)
#pragma unroll 4
    for (int64_t r = s.begin + s.ty; r < s.end; r += kRowLanes) {
      const Pack<T, kWideColumns> e = *reinterpret_cast<const Pack<T, kWideColumns>*>(x + r * n + s.j);
#pragma unroll
      for (int k = 0; k < kWideColumns; ++k) a[k] += to_float(e.at[k]);
    }
  write_wide_partials(a, s, lanes, partial, n);
}

// out[j] = the sum of column j's partials, divided by `divisor`.
template <typename T>
__global__ void sum_chunks_kernel(const float* partial, int chunks, int64_t n, float divisor, T* out) {
  ONNXTRAIN_GRID_LOOP(j, n) {
    float a = 0;
    for (int c = 0; c < chunks; ++c) a += partial[int64_t(c) * n + j];
    out[j] = from_float<T>(a / divisor);
  }
}

}  // namespace onnxtrain::kernels::cuda
