#include "kernels/cpu/norm_output_rows.h"

#include <type_traits>

#include "core/cpu_features.h"
#include "kernels/cpu/avx512_lanes.h"
#include "ops/op.h"

namespace onnxtrain::kernels {
namespace {

// (built with -ffp-contract=off: no product is fused with the bias's sum, in the lanes or in the loop)
template <typename Y>
ONNXTRAIN_AVX512 void row_avx512(const float* x, float mean, float rstd, const float* scale, const float* bias, Y* y,
                                 int64_t n) {
  const __m512 m = _mm512_set1_ps(mean), rs = _mm512_set1_ps(rstd);
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 k = n - j >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - j)) - 1);
    const __m512 centred = _mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + j), m);
    __m512 v = _mm512_mul_ps(_mm512_mul_ps(centred, rs), _mm512_maskz_loadu_ps(k, scale + j));
    if (bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(k, bias + j));
    if constexpr (std::is_same_v<Y, float>) {
      _mm512_mask_storeu_ps(y + j, k, v);
    } else {
      _mm512_mask_storeu_epi16(y + j, __mmask32(k), _mm512_castsi256_si512(_mm512_cvtepi32_epi16(bf16_bits(v))));
    }
  }
}

}  // namespace

template <typename Y>
void norm_output_row(const float* x, float mean, float rstd, const float* scale, const float* bias, Y* y, int64_t n) {
  if (cpu::features().avx512) return row_avx512(x, mean, rstd, scale, bias, y, n);
  for (int64_t j = 0; j < n; ++j) {
    const float v = (x[j] - mean) * rstd * scale[j];
    y[j] = Y(bias ? v + bias[j] : v);
  }
}

template void norm_output_row<float>(const float*, float, float, const float*, const float*, float*, int64_t);
template void norm_output_row<BFloat16>(const float*, float, float, const float*, const float*, BFloat16*, int64_t);

bool float32_with_a_bf16_output(ops::InferCtx& s) {
  for (size_t i = 0; i < s.num_inputs(); ++i)
    if (s.has(i) && s.dtype(i) != DType::kFloat32) return false;
  for (size_t i = 0; i < s.outputs().size(); ++i)
    if (s.outputs()[i].dtype != (i == 0 ? DType::kBFloat16 : DType::kFloat32)) return false;
  return true;
}

}  // namespace onnxtrain::kernels
