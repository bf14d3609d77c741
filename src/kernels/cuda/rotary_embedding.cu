// com.onnxtrain.RotaryEmbedding on the GPU: a thread per pair (x1[j], x2[j]) of a row's halves, cos and sin read
// where they broadcast to the row, in float32; X, cos and sin, and Y each of its own float dtype (autocast's 16-bit X
// and Y with float32 cos and sin, the casts around it folded in).
#include <type_traits>

#include "kernels/cuda/device_types.cuh"

namespace onnxtrain::kernels::cuda {
namespace {

template <typename TX, typename TC, typename TY>
__global__ void rotary_kernel(const TX* x, const TC* cos, const TC* sin, TY* y, Indexing rows, int64_t pairs,
                              int64_t half, bool transposed) {
  ONNXTRAIN_GRID_LOOP(i, pairs) {
    const int64_t r = i / half, j = i % half;
    const Offsets<2> o = offsets<2>(rows, r);
    const TX* xr = x + r * 2 * half;
    const TC *c = cos + o.at[0], *s = sin + o.at[1];
    const float a = to_float(xr[j]), b = to_float(xr[half + j]);
    const float ca = to_float(c[j]), cb = to_float(c[half + j]), sa = to_float(s[j]), sb = to_float(s[half + j]);
    TY* yr = y + r * 2 * half;
    yr[j] = from_float<TY>(transposed ? a * ca + b * sb : a * ca - b * sa);
    yr[half + j] = from_float<TY>(transposed ? b * cb - a * sa : b * cb + a * sb);
  }
}

}  // namespace

void rotary_embedding(DType tx, DType tc, DType ty, const void* x, const void* cos, const void* sin, void* y,
                      const Indexing& rows, int64_t width, bool transposed, cudaStream_t stream) {
  const int64_t half = width / 2, pairs = numel(rows) * half;
  if (pairs == 0) return;
  bool launched = false;
  auto launch = [&](auto vx, auto vc, auto vy) {
    using TX = decltype(vx);
    using TC = decltype(vc);
    using TY = decltype(vy);
    rotary_kernel<<<blocks_for(pairs), kThreads, 0, stream>>>(static_cast<const TX*>(x), static_cast<const TC*>(cos),
                                                              static_cast<const TC*>(sin), static_cast<TY*>(y), rows,
                                                              pairs, half, transposed);
    launched = true;
  };
  with_float_type(tc, [&](auto vc) {
    if constexpr (std::is_same_v<decltype(vc), float>) {  // X and Y of any float dtype with float32 cos and sin
      with_float_type(tx, [&](auto vx) { with_float_type(ty, [&](auto vy) { launch(vx, vc, vy); }); });
    } else if (tx == tc && ty == tc) {
      launch(vc, vc, vc);
    }
  });
  if (!launched) unsupported_dtype("RotaryEmbedding", tx != tc ? tx : ty != tc ? ty : tc);
  check_launch("RotaryEmbedding");
}

}  // namespace onnxtrain::kernels::cuda
