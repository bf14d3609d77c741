#include "kernels/cpu/convert.h"

#include <immintrin.h>

#include "core/cpu_features.h"
#include "kernels/cpu/avx512_lanes.h"

namespace onnxtrain::kernels {
namespace {

ONNXTRAIN_AVX512 void to_f32_avx512(const BFloat16* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, load_bf16(x + i));
  for (; i < n; ++i) y[i] = float(x[i]);
}

ONNXTRAIN_AVX512 void from_f32_avx512(const float* x, BFloat16* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) store_bf16(y + i, _mm512_loadu_ps(x + i));
  for (; i < n; ++i) y[i] = BFloat16(x[i]);
}

// x's bf16 values widened back in place.
ONNXTRAIN_AVX512 void round_bf16_avx512(float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(x + i, round_bf16(_mm512_loadu_ps(x + i)));
  for (; i < n; ++i) x[i] = float(BFloat16(x[i]));
}

}  // namespace

void round_to(DType to, float* x, int64_t n) {
  if (to == DType::kBFloat16) {
    if (cpu::features().avx512) return round_bf16_avx512(x, n);
    for (int64_t i = 0; i < n; ++i) x[i] = float(BFloat16(x[i]));
  } else if (to == DType::kFloat16) {
    for (int64_t i = 0; i < n; ++i) x[i] = float(Half(x[i]));
  }
}

void to_f32(const BFloat16* x, float* y, int64_t n) {
  if (cpu::features().avx512) return to_f32_avx512(x, y, n);
  for (int64_t i = 0; i < n; ++i) y[i] = float(x[i]);
}

void from_f32(const float* x, BFloat16* y, int64_t n) {
  if (cpu::features().avx512) return from_f32_avx512(x, y, n);
  for (int64_t i = 0; i < n; ++i) y[i] = BFloat16(x[i]);
}

void to_f32(const Half* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = float(x[i]);
}

void from_f32(const float* x, Half* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = Half(x[i]);
}

}  // namespace onnxtrain::kernels
