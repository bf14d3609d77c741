// Sixteen float32 lanes with AVX-512 (callers check cpu::features().avx512): bfloat16 loads and stores, rounding to
// nearest even in integer arithmetic (NaNs stay quiet NaNs) bit for bit as float_to_bf16 does, not with
// AVX512_BF16's conversion, which reads float32 denormals as zero: every CPU rounds alike; and exp.
#pragma once
#include <immintrin.h>

#include "onnxtrain/dtype.h"

#define ONNXTRAIN_AVX512 __attribute__((target("avx512f,avx512bw")))

namespace onnxtrain::kernels {

// 16 floats' bf16 values in the low 16 bits of each lane.
ONNXTRAIN_AVX512 inline __m512i bf16_bits(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i rounded = _mm512_srli_epi32(
      _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                                           _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1)))),
      16);
  return _mm512_mask_or_epi32(rounded, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), _mm512_srli_epi32(u, 16),
                              _mm512_set1_epi32(0x40));
}

ONNXTRAIN_AVX512 inline __m512 load_bf16(const BFloat16* x) {
  const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}

ONNXTRAIN_AVX512 inline void store_bf16(BFloat16* y, __m512 v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(y), _mm512_cvtepi32_epi16(bf16_bits(v)));
}

// The lanes of the first min(left, 16) elements (a row's last vector, under a mask).
inline __mmask16 first_lanes(int64_t left) { return left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1); }

// The loads and stores above, of the lanes of k alone (nothing read or written beyond them; the others load 0).
ONNXTRAIN_AVX512 inline __m512 load_bf16(const BFloat16* x, __mmask16 k) {
  const __m512i w = _mm512_cvtepu16_epi32(_mm512_castsi512_si256(_mm512_maskz_loadu_epi16(__mmask32(k), x)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}
ONNXTRAIN_AVX512 inline void store_bf16(BFloat16* y, __m512 v, __mmask16 k) {
  _mm512_mask_storeu_epi16(y, __mmask32(k), _mm512_castsi256_si512(_mm512_cvtepi32_epi16(bf16_bits(v))));
}

// v's values rounded to bf16, as float32.
ONNXTRAIN_AVX512 inline __m512 round_bf16(__m512 v) { return _mm512_castsi512_ps(_mm512_slli_epi32(bf16_bits(v), 16)); }

// Sixteen bools (bytes of 0 or 1) as a mask.
ONNXTRAIN_AVX512 inline __mmask16 mask_of(const bool* b) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b));
  return _mm512_test_epi32_mask(_mm512_cvtepu8_epi32(bytes), _mm512_set1_epi32(1));
}

// exp(x) to a few float32 units: x = n ln 2 + r, exp(r) by its Taylor polynomial, times 2^n (scalef: exact, also
// where the result is denormal); 0 below exp's range, +inf above it, NaN for NaN.
ONNXTRAIN_AVX512 inline __m512 exp16(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-87.33654f), hi = _mm512_set1_ps(88.72284f);  // exp: 2^-126 and FLT_MAX
  const __m512 c = _mm512_min_ps(_mm512_max_ps(x, lo), hi);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(c, _mm512_set1_ps(1.44269504f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), c);  // ln 2 in two parts
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.f / 5040);
  for (float k : {1.f / 720, 1.f / 120, 1.f / 24, 1.f / 6, 0.5f, 1.f, 1.f})
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(k));
  __m512 y = _mm512_scalef_ps(p, n);
  y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ), _mm512_setzero_ps());
  y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, hi, _CMP_GT_OQ), _mm512_set1_ps(__builtin_inff()));
  return _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}

}  // namespace onnxtrain::kernels
