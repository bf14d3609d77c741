#include "kernels/cpu/convert.h"

#include <immintrin.h>

#include "core/cpu_features.h"

namespace onnxtrain::kernels {
namespace {

__attribute__((target("avx512f,avx512bw"))) void to_f32_avx512(const BFloat16* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)));
    _mm512_storeu_ps(y + i, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
  }
  for (; i < n; ++i) y[i] = float(x[i]);
}

// 16 floats' bf16 values in the low 16 bits of each lane: rounded to nearest even in integer arithmetic (NaNs stay
// quiet NaNs), bit for bit as float_to_bf16 does; not with AVX512_BF16's conversion, which reads float32 denormals as
// zero: every CPU rounds alike.
__attribute__((target("avx512f,avx512bw"))) __m512i bf16_bits(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i rounded = _mm512_srli_epi32(
      _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                                           _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1)))),
      16);
  return _mm512_mask_or_epi32(rounded, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), _mm512_srli_epi32(u, 16),
                              _mm512_set1_epi32(0x40));
}

__attribute__((target("avx512f,avx512bw"))) void from_f32_avx512(const float* x, BFloat16* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), _mm512_cvtepi32_epi16(bf16_bits(_mm512_loadu_ps(x + i))));
  for (; i < n; ++i) y[i] = BFloat16(x[i]);
}

// x's bf16 values widened back in place.
__attribute__((target("avx512f,avx512bw"))) void round_bf16_avx512(float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(x + i, _mm512_castsi512_ps(_mm512_slli_epi32(bf16_bits(_mm512_loadu_ps(x + i)), 16)));
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
