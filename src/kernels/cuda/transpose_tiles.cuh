// A strided copy that transposes: the destination runs contiguous along its last dim, the source along another one
// (Transpose's swap of the last two dims, as attention's K^T). The generic copy (movement.cu) reads such a source
// element by element, 2 of every 32 bytes it fetches used; here a block moves 32 x 32 tiles through shared memory,
// reading them along the source's contiguous dim and writing them along the destination's, each warp's accesses
// coalesced on both sides. The other dims are a batch of tiles.
#pragma once
#include "kernels/cuda/device_types.cuh"

namespace onnxtrain::kernels::cuda {

constexpr int kTransposeTile = 32, kTransposeLanes = 8;  // a block: 32 x 8 threads over a 32 x 32 tile
constexpr int kTransposeThreads = kTransposeTile * kTransposeLanes;

// The copy as tiles: dim p (rows) the source's contiguous one, the last (cols) the destination's; `batch` the other
// dims (strides[0] the destination's, strides[1] the source's).
struct TransposeTiles {
  Indexing batch;
  int64_t rows = 0, cols = 0, dst_row = 0, src_col = 0, row_tiles = 0, col_tiles = 0;
  int64_t blocks() const { return numel(batch) * row_tiles * col_tiles; }
};

// strided_copy's ix (strides[0] the destination's, strides[1] the source's) as tiles, where it transposes and both
// dims span at least half a tile (a narrower one would leave most of each tile's threads idle: the generic copy
// serves it).
inline bool transpose_tiles(const Indexing& ix, TransposeTiles& t) {
  const int last = ix.rank - 1;
  if (last < 1 || ix.strides[0][last] != 1 || ix.strides[1][last] == 1) return false;
  int p = -1;
  for (int d = 0; d < last; ++d)
    if (ix.strides[1][d] == 1 && ix.dims[d] > 1) p = d;
  const int64_t half = kTransposeTile / 2;
  if (p < 0 || ix.dims[p] < half || ix.dims[last] < half) return false;
  t = TransposeTiles{};
  for (int d = 0; d < last; ++d) {
    if (d == p) continue;
    const int r = t.batch.rank++;
    t.batch.dims[r] = ix.dims[d];
    t.batch.strides[0][r] = ix.strides[0][d];
    t.batch.strides[1][r] = ix.strides[1][d];
  }
  if (t.batch.rank == 0) t.batch.rank = 1, t.batch.dims[0] = 1;
  t.rows = ix.dims[p], t.cols = ix.dims[last], t.dst_row = ix.strides[0][p], t.src_col = ix.strides[1][last];
  t.row_tiles = (t.rows + kTransposeTile - 1) / kTransposeTile;
  t.col_tiles = (t.cols + kTransposeTile - 1) / kTransposeTile;
  return true;
}

// A block per tile (grid: t.blocks(), kTransposeThreads threads).
template <typename T>
__global__ void __launch_bounds__(kTransposeThreads) transpose_tiles_kernel(const T* src, T* dst, TransposeTiles t) {
  __shared__ T tile[kTransposeTile][kTransposeTile + 1];  // [col][row], a column of padding against bank conflicts
  const int64_t per_batch = t.row_tiles * t.col_tiles, b = blockIdx.x / per_batch, at = blockIdx.x % per_batch;
  const int64_t r0 = at / t.col_tiles * kTransposeTile, c0 = at % t.col_tiles * kTransposeTile;
  const Offsets<2> o = offsets<2>(t.batch, b);
  const int lane = int(threadIdx.x % kTransposeTile), step = int(threadIdx.x / kTransposeTile);
  for (int i = step; i < kTransposeTile; i += kTransposeLanes)  // along the source's rows: lanes on consecutive rows
    if (r0 + lane < t.rows && c0 + i < t.cols) tile[i][lane] = src[o.at[1] + r0 + lane + (c0 + i) * t.src_col];
  __syncthreads();
  for (int i = step; i < kTransposeTile; i += kTransposeLanes)  // along the destination's columns
    if (r0 + i < t.rows && c0 + lane < t.cols) dst[o.at[0] + (r0 + i) * t.dst_row + c0 + lane] = tile[lane][i];
}

}  // namespace onnxtrain::kernels::cuda
