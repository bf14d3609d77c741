// com.onnxtrain.RotaryEmbedding on the GPU: a thread per pair (x1[j], x2[j]) of a row's halves, cos and sin read
// where they broadcast to the row, in float32.
#include "kernels/cuda/device_types.cuh"

namespace onnxtrain::kernels::cuda {
namespace {

template <typename T>
__global__ void rotary_kernel(const T* x, const T* cos, const T* sin, T* y, Indexing rows, int64_t pairs,
                              int64_t half, bool transposed) {
  ONNXTRAIN_GRID_LOOP(i, pairs) {
    const int64_t r = i / half, j = i % half;
    const Offsets<2> o = offsets<2>(rows, r);
    const T *xr = x + r * 2 * half, *c = cos + o.at[0], *s = sin + o.at[1];
    const float a = to_float(xr[j]), b = to_float(xr[half + j]);
    const float ca = to_float(c[j]), cb = to_float(c[half + j]), sa = to_float(s[j]), sb = to_float(s[half + j]);
    T* yr = y + r * 2 * half;
    yr[j] = from_float<T>(transposed ? a * ca + b * sb : a * ca - b * sa);
    yr[half + j] = from_float<T>(transposed ? b * cb - a * sa : b * cb + a * sb);
  }
}

}  // namespace

void rotary_embedding(DType t, const void* x, const void* cos, const void* sin, void* y, const Indexing& rows,
                      int64_t width, bool transposed, cudaStream_t stream) {
  const int64_t half = width / 2, pairs = numel(rows) * half;
  if (pairs == 0) return;
  bool ok = with_float_type(t, [&](auto v) {
    using T = decltype(v);
    rotary_kernel<<<blocks_for(pairs), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<const T*>(cos),
                                                              static_cast<const T*>(sin), static_cast<T*>(y), rows,
                                                              pairs, half, transposed);
  });
  if (!ok) unsupported_dtype("RotaryEmbedding", t);
  check_launch("RotaryEmbedding");
}

}  // namespace onnxtrain::kernels::cuda
