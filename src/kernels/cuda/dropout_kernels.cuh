// Dropout's kernels (elementwise.cu launches them; Dropout and DropoutGrad, which draws the mask again): the CPU's
// counter-based draw (kernels/counter_random.h). Where every pointer aligns to packs of 16 elements, a thread takes a
// pack: one key of the draw for it (a block of 64 elements' hash) and eight draws for its 16 elements (p and p + 8
// share one), the operands read and written 16 bytes at a time; else a thread an element, each drawing its block's key
// (two 64-bit hashes an element, which had taken GPT-2's residual dropouts to 67 us a call on an H200, twice their
// bytes' time). In a header so that the tests' warp emulation runs them on the host.
#pragma once
#include <type_traits>

#include "kernels/counter_random.h"
#include "kernels/cuda/packed_map.cuh"

namespace onnxtrain::kernels::cuda {

constexpr int kDropoutPack = 16;

// An element of y: x in dtype M (the narrower of In and Out: the input rounded to it first), scaled where kept, then
// in Out, plus r's element where there is r (launch.h's dropout).
template <typename In, typename Out>
__device__ __forceinline__ Out dropped(In x, bool keep, const Out* r, float scale) {
  using M = std::conditional_t<(sizeof(In) < sizeof(Out)), In, Out>;
  const float m = to_float(from_float<M>(to_float(x)));  // (the product rounded before the sum: no FMA)
  const Out v = keep ? from_float<Out>(to_float(from_float<M>(__fmul_rn(m, scale)))) : from_float<Out>(0.f);
  return r ? from_float<Out>(__fadd_rn(to_float(*r), to_float(v))) : v;
}

template <typename In, typename Out>
__global__ void dropout_kernel(const In* x, const Out* r, Out* y, bool* mask, int64_t n, uint64_t seed,
                               uint32_t threshold, float scale) {
  ONNXTRAIN_GRID_LOOP(i, n) {
    const bool keep = dropout_keeps(seed, uint64_t(i), threshold);
    y[i] = dropped(x[i], keep, r ? r + i : nullptr, scale);
    if (mask) mask[i] = keep;
  }
}

// Packs of kDropoutPack elements a thread (x, r, y and mask aligned to them: packs_align), the n % kDropoutPack past
// the last whole pack one each to the grid's first threads.
template <typename In, typename Out>
__global__ void dropout_packs_kernel(const In* x, const Out* r, Out* y, bool* mask, int64_t n, uint64_t seed,
                                     uint32_t threshold, float scale) {
  constexpr int V = kDropoutPack;
  const int64_t packs = n / V;
  ONNXTRAIN_GRID_LOOP(p, packs) {
    const uint64_t i0 = uint64_t(p) * V;
    const uint32_t key = dropout_key(seed, i0 / kDropoutBlock), p0 = uint32_t(i0 % kDropoutBlock);
    const Pack<In, V> xs = reinterpret_cast<const Pack<In, V>*>(x)[p];
    Pack<Out, V> rs;
    if (r) rs = reinterpret_cast<const Pack<Out, V>*>(r)[p];
    Pack<bool, V> keep;
#pragma unroll
    for (int h = 0; h < V / 2; ++h) {
      const uint32_t draw = dropout_draw(key, p0 + uint32_t(h));
      keep.at[h] = dropout_half_keeps(draw, false, threshold);
      keep.at[h + V / 2] = dropout_half_keeps(draw, true, threshold);
    }
    Pack<Out, V> ys;
#pragma unroll
    for (int k = 0; k < V; ++k) ys.at[k] = dropped(xs.at[k], keep.at[k], r ? &rs.at[k] : nullptr, scale);
    reinterpret_cast<Pack<Out, V>*>(y)[p] = ys;
    if (mask) reinterpret_cast<Pack<bool, V>*>(mask)[p] = keep;
  }
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, i = packs * V + t;
  if (t < V && i < n) {
    const bool k = dropout_keeps(seed, uint64_t(i), threshold);
    y[i] = dropped(x[i], k, r ? r + i : nullptr, scale);
    if (mask) mask[i] = k;
  }
}

}  // namespace onnxtrain::kernels::cuda
