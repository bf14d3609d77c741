#include "kernels/cpu/dropout_draws.h"

#include <immintrin.h>

#include "core/cpu_features.h"
#include "kernels/cpu/avx512_lanes.h"
#include "kernels/counter_random.h"

namespace onnxtrain::kernels {
namespace {

ONNXTRAIN_AVX512 __m512i mix32x16(__m512i x) {
  x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
  x = _mm512_mullo_epi32(x, _mm512_set1_epi32(int32_t(0x21f0aaadu)));
  x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 15));
  x = _mm512_mullo_epi32(x, _mm512_set1_epi32(int32_t(0x735a2d97u)));
  return _mm512_xor_si512(x, _mm512_srli_epi32(x, 15));
}

// Sixteen places at a time where they start a sixteen of their block: each place's draw is shared with place ^ 8
// (one of the 16 lanes' hashes is computed twice over), the lower eight keep by the draw's low 16 bits, the upper
// eight by its high ones.
ONNXTRAIN_AVX512 void draw_avx512(uint64_t seed, uint64_t i0, int64_t n, uint32_t threshold, bool* keep) {
  int64_t k = 0;
  for (; k < n && (i0 + uint64_t(k)) % 16; ++k) keep[k] = dropout_keeps(seed, i0 + uint64_t(k), threshold);
  const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7);
  const __mmask16 upper = 0xff00;
  const __m512i bound = _mm512_set1_epi32(int32_t(threshold)), low16 = _mm512_set1_epi32(0xffff);
  uint32_t key = 0;
  for (const int64_t first = k; k + 16 <= n; k += 16) {
    const uint64_t i = i0 + uint64_t(k);
    const uint32_t place = uint32_t(i % kDropoutBlock);
    if (place == 0 || k == first) key = dropout_key(seed, i / kDropoutBlock);  // (a key a block)
    const __m512i places = _mm512_add_epi32(lanes, _mm512_set1_epi32(int32_t(place)));
    const __m512i golden = _mm512_mullo_epi32(places, _mm512_set1_epi32(int32_t(0x9E3779B9u)));
    const __m512i draw = mix32x16(_mm512_xor_si512(_mm512_set1_epi32(int32_t(key)), golden));
    const __m512i half = _mm512_mask_srli_epi32(_mm512_and_si512(draw, low16), upper, draw, 16);
    const __mmask16 kept = _mm512_cmpge_epu32_mask(half, bound);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(keep + k), _mm512_cvtepi32_epi8(_mm512_maskz_set1_epi32(kept, 1)));
  }
  for (; k < n; ++k) keep[k] = dropout_keeps(seed, i0 + uint64_t(k), threshold);
}

}  // namespace

void dropout_keeps_draw(uint64_t seed, uint64_t i0, int64_t n, uint32_t threshold, bool* keep) {
  if (cpu::features().avx512) return draw_avx512(seed, i0, n, threshold, keep);
  dropout_keeps_run(seed, i0, n, threshold, keep);
}

}  // namespace onnxtrain::kernels
