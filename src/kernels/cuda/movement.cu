// Data movement on the GPU: one strided copy serves Transpose, Expand, Slice, Concat's and Split's parts and
// Identity (contiguous runs moved up to 16 bytes an element, transposes by tiles: transpose_tiles.cuh); Trilu keeps a
// triangle; Pad reads each output element's source as the CPU's kernel does.
#include "kernels/cuda/device_types.cuh"
#include "kernels/cuda/runtime.h"
#include "kernels/cuda/transpose_tiles.cuh"

namespace onnxtrain::kernels::cuda {
namespace {

template <typename T>
__global__ void strided_copy_kernel(const T* src, T* dst, Indexing ix, int64_t n) {
  ONNXTRAIN_GRID_LOOP(i, n) {
    Offsets<2> o = offsets<2>(ix, i);
    dst[o.at[0]] = src[o.at[1]];
  }
}

template <typename T>
__global__ void trilu_kernel(const T* x, T* y, int64_t rows, int64_t cols, int64_t k, bool upper, int64_t n) {
  ONNXTRAIN_GRID_LOOP(i, n) {
    const int64_t j = i % cols, r = i / cols % rows;
    y[i] = (upper ? j - r >= k : j - r <= k) ? x[i] : T(0);
  }
}

template <typename T>
__global__ void pad_kernel(const T* x, T* y, PadShape p, T value, int64_t n) {
  ONNXTRAIN_GRID_LOOP(i, n) {
    int64_t rem = i, off = 0, stride = 1;
    bool inside = true;
    for (int d = p.rank - 1; d >= 0; --d) {
      int64_t q = rem % p.out[d] - p.before[d];
      const int64_t size = p.in[d];
      rem /= p.out[d];
      if (q < 0 || q >= size) {
        if (p.mode == 0 || size == 0) {
          inside = false;
        } else if (p.mode == 2) {
          q = q < 0 ? 0 : size - 1;
        } else if (p.mode == 3) {
          q = ((q % size) + size) % size;
        } else {
          const int64_t period = 2 * (size - 1);
          q = period == 0 ? 0 : ((q % period) + period) % period;
          if (q >= size) q = period - q;
        }
      }
      off += q * stride;
      stride *= size;
    }
    y[i] = inside ? x[off] : value;
  }
}

}  // namespace

void pad(int elem_bytes, const void* x, void* y, const PadShape& p, uint64_t value, cudaStream_t stream) {
  int64_t n = 1;
  for (int d = 0; d < p.rank; ++d) n *= p.out[d];
  if (n == 0) return;
  with_bytes(elem_bytes, "Pad", [&](auto v) {
    using T = decltype(v);
    pad_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), p, T(value), n);
  });
  check_launch("Pad");
}

void trilu(int elem_bytes, const void* x, void* y, int64_t batch, int64_t rows, int64_t cols, int64_t k, bool upper,
           cudaStream_t stream) {
  const int64_t n = batch * rows * cols;
  if (n == 0) return;
  with_bytes(elem_bytes, "Trilu", [&](auto v) {
    using T = decltype(v);
    trilu_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), rows, cols, k,
                                                         upper, n);
  });
  check_launch("Trilu");
}

void strided_copy(int elem_bytes, const void* src, void* dst, const Indexing& ix, cudaStream_t stream) {
  Indexing wide = ix;
  const int bytes = widen_contiguous_runs(wide, elem_bytes, dst, src);
  const int64_t n = numel(wide);
  if (n == 0) return;
  TransposeTiles tiles;
  if (transpose_tiles(wide, tiles) && tiles.blocks() <= 0x7fffffff) {
    with_bytes(bytes, "strided_copy", [&](auto v) {
      using T = decltype(v);
      transpose_tiles_kernel<<<unsigned(tiles.blocks()), kTransposeThreads, 0, stream>>>(
          static_cast<const T*>(src), static_cast<T*>(dst), tiles);
    });
    return check_launch("strided_copy");
  }
  auto launch = [&](auto v) {
    using T = decltype(v);
    strided_copy_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const T*>(src), static_cast<T*>(dst),
                                                                wide, n);
  };
  if (bytes == 16)
    launch(uint4{});
  else
    with_bytes(bytes, "strided_copy", launch);
  check_launch("strided_copy");
}

}  // namespace onnxtrain::kernels::cuda
