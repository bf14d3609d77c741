// float32 <-> bfloat16 / float16 arrays, vectorised where the CPU can (core/cpu_features.h), and the adapter that
// lets a float32 array kernel serve a low-precision dtype: in blocks converted to float32 and back.
#pragma once
#include <array>
#include <cstdint>
#include <cstring>

#include "onnxtrain/dtype.h"

namespace onnxtrain::kernels {

void to_f32(const BFloat16* x, float* y, int64_t n);
void from_f32(const float* x, BFloat16* y, int64_t n);  // rounding to nearest even
void to_f32(const Half* x, float* y, int64_t n);
void from_f32(const float* x, Half* y, int64_t n);
// x rounded in place to the values of `to` (bfloat16 or float16, to nearest even as from_f32 rounds; any other
// dtype: left as it is).
void round_to(DType to, float* x, int64_t n);
inline void to_f32(const float* x, float* y, int64_t n) { std::memcpy(y, x, size_t(n) * sizeof(float)); }
inline void from_f32(const float* x, float* y, int64_t n) { std::memcpy(y, x, size_t(n) * sizeof(float)); }

// fn(in, out, m) on float32 blocks of at most kF32Block elements covering [b, e): the I inputs of type T are
// converted to float32 before, the O outputs back to T after each block.
constexpr int64_t kF32Block = 512;
template <typename T, size_t I, size_t O, typename F>
void in_f32_blocks(const std::array<const T*, I>& in, const std::array<T*, O>& out, int64_t b, int64_t e, F fn) {
  float buf[I + O][kF32Block];
  for (int64_t s = b; s < e; s += kF32Block) {
    int64_t m = e - s < kF32Block ? e - s : kF32Block;
    std::array<const float*, I> fin;
    std::array<float*, O> fout;
    for (size_t k = 0; k < I; ++k) to_f32(in[k] + s, buf[k], m), fin[k] = buf[k];
    for (size_t k = 0; k < O; ++k) fout[k] = buf[I + k];
    fn(fin, fout, m);
    for (size_t k = 0; k < O; ++k) from_f32(fout[k], out[k] + s, m);
  }
}

}  // namespace onnxtrain::kernels
