#include "kernels/cpu/norm_output_rows.h"

#include <type_traits>

#include "core/cpu_features.h"
#include "kernels/cpu/avx512_lanes.h"
#include "kernels/cpu/in_float32.h"

namespace onnxtrain::kernels {
namespace {

// (built with -ffp-contract=off: no product is fused with the bias's sum, in the lanes or in the loop)
template <typename Y>
ONNXTRAIN_AVX512 void row_avx512(const float* x, float mean, float rstd, const float* scale, const float* bias, Y* y,
                                 int64_t n) {
  const __m512 m = _mm512_set1_ps(mean), rs = _mm512_set1_ps(rstd);
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 k = first_lanes(n - j);
    const __m512 centred = _mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + j), m);
    __m512 v = _mm512_mul_ps(_mm512_mul_ps(centred, rs), _mm512_maskz_loadu_ps(k, scale + j));
    if (bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(k, bias + j));
    if constexpr (std::is_same_v<Y, float>)
      _mm512_mask_storeu_ps(y + j, k, v);
    else
      store_bf16(y + j, v, k);
  }
}

template <typename Y>
void row(const float* x, float mean, float rstd, const float* scale, const float* bias, Y* y, int64_t n) {
  if (cpu::features().avx512) return row_avx512(x, mean, rstd, scale, bias, y, n);
  for (int64_t j = 0; j < n; ++j) {
    const float v = (x[j] - mean) * rstd * scale[j];
    y[j] = Y(bias ? v + bias[j] : v);
  }
}

}  // namespace

void norm_output_row(const float* x, float mean, float rstd, const float* scale, const float* bias, Tensor& y,
                     int64_t r, int64_t n) {
  if (y.dtype() == DType::kBFloat16) return row(x, mean, rstd, scale, bias, y.data<BFloat16>() + r * n, n);
  row(x, mean, rstd, scale, bias, y.data<float>() + r * n, n);
}

bool float32_with_a_bf16_output(ops::InferCtx& s) { return float32_but_one_bf16(s, -1, 0); }

}  // namespace onnxtrain::kernels
