// exp, erf and GELU of float32 arrays with AVX2/FMA: polynomial approximations
// within a few units in the last place of float32 (exp: range reduction by ln 2
// and a degree-7 polynomial; erf: its Taylor series below 1, Abramowitz and
// Stegun's formula 7.1.26 above). libm's scalar calls were most of the time of
// GELU, softmax and their gradients. A tail shorter than a vector is computed
// as a padded full vector, so each element's result never depends on where it
// sits in the array (a recomputed activation stays bit-identical).
#pragma once
#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace onnxtrain::kernels {

void exp_f32(const float* x, float* y, int64_t n);
void erf_f32(const float* x, float* y, int64_t n);
void gelu_f32(const float* x, float* y, int64_t n);  // 0.5 x (1 + erf(x / sqrt 2))
// GELU's tanh form, 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) (GPT-2's gelu_new), and its gradient dy GELU'(x).
void gelu_tanh_f32(const float* x, float* y, int64_t n);
void gelu_tanh_grad_f32(const float* dy, const float* x, float* dx, int64_t n);
// Both at once, bit for bit as the two above: dx = dy * GELU'(x), y = GELU(x); dx may be dy, y x.
void gelu_tanh_and_grad_f32(const float* dy, const float* x, float* dx, float* y, int64_t n);
// GELU's gradient: dy * (Phi(x) + x phi(x)), Phi and phi the standard normal's CDF and density.
void gelu_grad_f32(const float* dy, const float* x, float* dx, int64_t n);
// Both at once, bit for bit as the two above: dx = dy * GELU'(x), y = GELU(x) (erf computed once); dx may be dy.
void gelu_and_grad_f32(const float* dy, const float* x, float* dx, float* y, int64_t n);
// log(sum(exp(x))) over n floats, as max + log(sum(exp(x - max))).
float log_sum_exp_f32(const float* x, int64_t n);
// y = log(softmax(x)) = x - log_sum_exp_f32(x), which it returns (y may be x).
float log_softmax_f32(const float* x, float* y, int64_t n);
// y = softmax(x) over n floats: max, exp(x - max) and their sum in one vector pass each, then the scale.
void softmax_f32(const float* x, float* y, int64_t n);
// y = softmax(c ? fill : x * scale) (attention's scale and mask), bit for bit as softmax_f32 of the masked row;
// when exp(fill - max) is 0, eight masked entries in a row cost no exp (half of a causal mask's row on average).
void masked_softmax_f32(const float* x, const bool* c, float scale, float fill, float* y, int64_t n);
// The masked softmax's gradient: dx = c ? 0 : y * (dy - sum(dy * y)) * scale (the products summed in double).
void masked_softmax_grad_f32(const float* dy, const float* y, const bool* c, float scale, float* dx, int64_t n);
// y = c ? fill : x * scale (y may be x).
void masked_scale_f32(const float* x, const bool* c, float scale, float fill, float* y, int64_t n);
// The largest of n floats (-inf for none; NaNs are not propagated).
float max_f32(const float* x, int64_t n);
// The sum of n floats, accumulated in double four lanes at a time.
double sum_f32(const float* x, int64_t n);
// The mean and the (biased) variance of n floats, accumulated in double: a sum, then the centred sum of squares.
void mean_var_f32(const float* x, int64_t n, double* mean, double* var);

// The largest of a row and its sum (in double), vectorised for float32, in order for other types.
template <typename T>
T row_max(const T* x, int64_t n) {
  if constexpr (std::is_same_v<T, float>) return max_f32(x, n);
  T m = -std::numeric_limits<T>::infinity();
  for (int64_t i = 0; i < n; ++i) m = std::max(m, x[i]);
  return m;
}
template <typename T>
double row_sum(const T* x, int64_t n) {
  if constexpr (std::is_same_v<T, float>) return sum_f32(x, n);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  return sum;
}

}  // namespace onnxtrain::kernels
