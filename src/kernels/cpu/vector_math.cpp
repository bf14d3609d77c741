#include "kernels/cpu/vector_math.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/cpu_features.h"
#include "kernels/cpu/avx512_lanes.h"

namespace onnxtrain::kernels {
namespace {

__m256 exp8(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.33654f), hi = _mm256_set1_ps(88.72284f);  // exp: 2^-126 and FLT_MAX
  __m256 c = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
  __m256 n =
      _mm256_round_ps(_mm256_mul_ps(c, _mm256_set1_ps(1.44269504f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), c);  // ln 2 in two parts
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.f / 5040);
  for (float k : {1.f / 720, 1.f / 120, 1.f / 24, 1.f / 6, 0.5f, 1.f, 1.f})
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(k));
  // p * 2^n as p * 2^(n/2) * 2^(n - n/2): each factor a normal float for n in [-126, 128].
  auto pow2 = [](__m256i k) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k, _mm256_set1_epi32(127)), 23));
  };
  __m256i ni = _mm256_cvtps_epi32(n), half = _mm256_srai_epi32(ni, 1);
  __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, pow2(half)), pow2(_mm256_sub_epi32(ni, half)));
  y = _mm256_blendv_ps(y, _mm256_setzero_ps(), _mm256_cmp_ps(x, lo, _CMP_LT_OQ));  // underflow
  y = _mm256_blendv_ps(y, _mm256_set1_ps(__builtin_inff()), _mm256_cmp_ps(x, hi, _CMP_GT_OQ));
  return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));  // NaN stays NaN
}

// erf for |x| < 1: x * sum_k (-1)^k x^2k / (k! (2k + 1)), times 2 / sqrt(pi).
__m256 erf_small8(__m256 x) {
  static const float taylor[] = {-1.f / 6894720, 1.f / 685440, -1.f / 75600, 1.f / 9360, -1.f / 1320,
                                 1.f / 216,      -1.f / 42,    1.f / 10,     -1.f / 3,   1.f};
  __m256 x2 = _mm256_mul_ps(x, x), p = _mm256_set1_ps(taylor[0]);
  for (int k = 1; k < 10; ++k) p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(taylor[k]));
  return _mm256_mul_ps(_mm256_mul_ps(x, p), _mm256_set1_ps(1.1283791670955126f));
}

// erf for |x| >= 1: 1 - t (a1 + t (a2 + ...)) exp(-x^2), t = 1 / (1 + 0.3275911 |x|), with x's sign.
__m256 erf_large8(__m256 x, __m256 ax, __m256 sign) {
  __m256 t = _mm256_div_ps(_mm256_set1_ps(1.f), _mm256_fmadd_ps(_mm256_set1_ps(0.3275911f), ax, _mm256_set1_ps(1.f)));
  __m256 q = _mm256_set1_ps(1.061405429f);
  for (float a : {-1.453152027f, 1.421413741f, -0.284496736f, 0.254829592f})
    q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(a));
  q = _mm256_mul_ps(q, t);
  __m256 large =
      _mm256_fnmadd_ps(q, exp8(_mm256_sub_ps(_mm256_setzero_ps(), _mm256_mul_ps(x, x))), _mm256_set1_ps(1.f));
  return _mm256_or_ps(large, _mm256_and_ps(x, sign));
}

// Each lane takes one branch; a vector whose lanes all fall on one side computes only that one (the result of
// a lane never depends on its neighbours).
__m256 erf8(__m256 x) {
  const __m256 sign = _mm256_set1_ps(-0.f);
  __m256 ax = _mm256_andnot_ps(sign, x);
  __m256 is_small = _mm256_cmp_ps(ax, _mm256_set1_ps(1.f), _CMP_LT_OQ);
  int mask = _mm256_movemask_ps(is_small);
  if (mask == 0xff) return erf_small8(x);
  if (mask == 0) return erf_large8(x, ax, sign);
  return _mm256_blendv_ps(erf_large8(x, ax, sign), erf_small8(x), is_small);
}

// erf(x / sqrt 2): GELU and its gradient share it (and so GeluAndGrad computes it once for both).
__m256 erf_scaled8(__m256 x) { return erf8(_mm256_mul_ps(x, _mm256_set1_ps(0.70710678118654752f))); }

__m256 gelu_from8(__m256 x, __m256 e) {
  return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), x), _mm256_add_ps(_mm256_set1_ps(1.f), e));
}

__m256 gelu_grad_from8(__m256 dy, __m256 x, __m256 e) {
  __m256 cdf = _mm256_mul_ps(_mm256_set1_ps(0.5f), _mm256_add_ps(_mm256_set1_ps(1.f), e));
  __m256 pdf = _mm256_mul_ps(_mm256_set1_ps(0.3989422804014327f),
                             exp8(_mm256_mul_ps(_mm256_set1_ps(-0.5f), _mm256_mul_ps(x, x))));
  return _mm256_mul_ps(dy, _mm256_fmadd_ps(x, pdf, cdf));
}

__m256 gelu8(__m256 x) { return gelu_from8(x, erf_scaled8(x)); }

// GELU's tanh form: t = tanh(k (x + c x^3)) as 1 - 2 / (exp(2z) + 1) (exp's overflow gives 1, its underflow -1).
constexpr float kGeluK = 0.7978845608028654f, kGeluC = 0.044715f;
__m256 gelu_tanh_t8(__m256 x) {
  __m256 x2 = _mm256_mul_ps(x, x);
  __m256 z = _mm256_mul_ps(_mm256_set1_ps(2 * kGeluK), _mm256_mul_ps(x, _mm256_fmadd_ps(_mm256_set1_ps(kGeluC), x2,
                                                                                         _mm256_set1_ps(1.f))));
  __m256 e = exp8(z);
  return _mm256_sub_ps(_mm256_set1_ps(1.f), _mm256_div_ps(_mm256_set1_ps(2.f), _mm256_add_ps(e, _mm256_set1_ps(1.f))));
}

__m256 gelu_tanh8(__m256 x) { return gelu_from8(x, gelu_tanh_t8(x)); }

// Element-wise over n floats, 8 at a time: f(inputs..., outputs...) on full vectors, the tail padded to one.
template <int In, int Out, typename F>
void map_n(const float* const (&in)[In], float* const (&out)[Out], int64_t n, F f) {
  int64_t i = 0;
  __m256 a[In], b[Out];
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < In; ++k) a[k] = _mm256_loadu_ps(in[k] + i);
    f(a, b);
    for (int k = 0; k < Out; ++k) _mm256_storeu_ps(out[k] + i, b[k]);
  }
  if (i == n) return;
  alignas(32) float buf[8];
  for (int k = 0; k < In; ++k) {
    std::fill(buf, buf + 8, 0.f);
    std::copy(in[k] + i, in[k] + n, buf);
    a[k] = _mm256_load_ps(buf);
  }
  f(a, b);
  for (int k = 0; k < Out; ++k) {
    _mm256_store_ps(buf, b[k]);
    std::copy(buf, buf + (n - i), out[k] + i);
  }
}

template <__m256 (*F)(__m256)>
void map8(const float* x, float* y, int64_t n) {
  map_n<1, 1>({x}, {y}, n, [](const __m256* a, __m256* b) { b[0] = F(a[0]); });
}

// The sum of f(x[i]) for 4 doubles at a time (f maps 4 doubles to 4 doubles), then the rest.
template <typename F>
double sum_pd(const float* x, int64_t n, F f) {
  __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    acc0 = _mm256_add_pd(acc0, f(_mm256_cvtps_pd(_mm256_castps256_ps128(v))));
    acc1 = _mm256_add_pd(acc1, f(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1))));
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(acc0, acc1));
  double s = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  for (; i < n; ++i) {
    alignas(32) double one[4];
    _mm256_store_pd(one, f(_mm256_set1_pd(double(x[i]))));
    s += one[0];
  }
  return s;
}

}  // namespace

double sum_f32(const float* x, int64_t n) {
  return sum_pd(x, n, [](__m256d v) { return v; });
}

void mean_var_f32(const float* x, int64_t n, double* mean, double* var) {
  double m = sum_f32(x, n) / double(n);
  __m256d mv = _mm256_set1_pd(m);
  *mean = m;
  *var = sum_pd(x, n,
                [mv](__m256d v) {
                  __m256d d = _mm256_sub_pd(v, mv);
                  return _mm256_mul_pd(d, d);
                }) /
         double(n);
}

// exp16 computes exp8's values (the same polynomial, its 2^n by scalef: one rounding, as exp8's two exact factors).
ONNXTRAIN_AVX512 static void exp_f32_avx512(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, exp16(_mm512_loadu_ps(x + i)));
  if (i == n) return;
  const __mmask16 tail = first_lanes(n - i);
  _mm512_mask_storeu_ps(y + i, tail, exp16(_mm512_maskz_loadu_ps(tail, x + i)));
}

void exp_f32(const float* x, float* y, int64_t n) {
  if (cpu::features().avx512) return exp_f32_avx512(x, y, n);
  map8<exp8>(x, y, n);
}

// y[i] = c[i] ? fill : x[i] * scale.
void masked_scale_f32(const float* x, const bool* c, float scale, float fill, float* y, int64_t n) {
  const __m256 s = _mm256_set1_ps(scale), f = _mm256_set1_ps(fill);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256i bytes = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(c + i)));
    __m256 masked = _mm256_castsi256_ps(_mm256_cmpgt_epi32(bytes, _mm256_setzero_si256()));
    _mm256_storeu_ps(y + i, _mm256_blendv_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), s), f, masked));
  }
  for (; i < n; ++i) y[i] = c[i] ? fill : x[i] * scale;
}

float max_f32(const float* x, int64_t n) {
  __m256 mv = _mm256_set1_ps(-__builtin_inff());
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) mv = _mm256_max_ps(mv, _mm256_loadu_ps(x + i));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, mv);
  float m = *std::max_element(lanes, lanes + 8);
  for (; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

namespace {

bool all_masked8(const bool* c) {
  uint64_t bytes;
  std::memcpy(&bytes, c, 8);
  return bytes == 0x0101010101010101ull;
}

// Softmax of x into y; with a mask c whose masked entries of x all hold `fill`, a vector of 8 masked entries
// is written as zeros without its exp when exp(fill - max) is 0 (exactly what computing it would give).
void softmax(const float* x, float* y, int64_t n, const bool* c, float fill) {
  const __m256 ninf = _mm256_set1_ps(-__builtin_inff());
  alignas(32) float tail[8];
  int64_t full = n / 8 * 8, rest = n - full;
  auto load_tail = [&](const float* src, float pad) {
    std::fill(tail, tail + 8, pad);
    std::copy(src + full, src + n, tail);
    return _mm256_load_ps(tail);
  };
  __m256 mv = ninf;
  for (int64_t i = 0; i < full; i += 8) mv = _mm256_max_ps(mv, _mm256_loadu_ps(x + i));
  if (rest) mv = _mm256_max_ps(mv, load_tail(x, -__builtin_inff()));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, mv);
  float m = *std::max_element(lanes, lanes + 8);
  if (m == -__builtin_inff()) m = 0;  // a row of -inf: exp gives zeros, the 0/0 below gives NaN as libm would
  const __m256 mm = _mm256_set1_ps(m);
  _mm256_store_ps(lanes, exp8(_mm256_sub_ps(_mm256_set1_ps(fill), mm)));
  const bool skip = c && lanes[0] == 0.f;
  __m256 sv = _mm256_setzero_ps();
  for (int64_t i = 0; i < full; i += 8) {
    if (skip && all_masked8(c + i)) {
      _mm256_storeu_ps(y + i, _mm256_setzero_ps());
      continue;
    }
    __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), mm));
    _mm256_storeu_ps(y + i, e);
    sv = _mm256_add_ps(sv, e);
  }
  if (rest) {
    __m256 e = exp8(_mm256_sub_ps(load_tail(x, -__builtin_inff()), mm));  // padding: exp(-inf) = 0
    sv = _mm256_add_ps(sv, e);
    _mm256_store_ps(tail, e);
    std::copy(tail, tail + rest, y + full);
  }
  _mm256_store_ps(lanes, sv);
  float sum = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
  const float inv = 1.f / sum;
  for (int64_t i = 0; i < n; ++i) y[i] *= inv;
}

}  // namespace

void softmax_f32(const float* x, float* y, int64_t n) { softmax(x, y, n, nullptr, 0.f); }

float log_sum_exp_f32(const float* x, int64_t n) {
  __m256 mv = _mm256_set1_ps(-__builtin_inff());
  int64_t full = n / 8 * 8;
  for (int64_t i = 0; i < full; i += 8) mv = _mm256_max_ps(mv, _mm256_loadu_ps(x + i));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, mv);
  float m = *std::max_element(lanes, lanes + 8);
  for (int64_t i = full; i < n; ++i) m = std::max(m, x[i]);
  if (m == -__builtin_inff()) m = 0;  // a row of -inf: log(0) below gives -inf - (-inf) = NaN, as libm would
  alignas(32) float chunk[256];       // exp(x - m) a chunk at a time, summed in double
  double sum = 0;
  for (int64_t i = 0; i < n; i += 256) {
    int64_t len = std::min<int64_t>(256, n - i);
    for (int64_t k = 0; k < len; ++k) chunk[k] = x[i + k] - m;
    exp_f32(chunk, chunk, len);
    sum += sum_f32(chunk, len);
  }
  return m + float(std::log(sum));
}

float log_softmax_f32(const float* x, float* y, int64_t n) {
  const float lse = log_sum_exp_f32(x, n);
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] - lse;
  return lse;
}

void masked_softmax_grad_f32(const float* dy, const float* y, const bool* c, float scale, float* dx, int64_t n) {
  __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 p = _mm256_mul_ps(_mm256_loadu_ps(dy + i), _mm256_loadu_ps(y + i));
    acc0 = _mm256_add_pd(acc0, _mm256_cvtps_pd(_mm256_castps256_ps128(p)));
    acc1 = _mm256_add_pd(acc1, _mm256_cvtps_pd(_mm256_extractf128_ps(p, 1)));
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(acc0, acc1));
  double dot = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  for (int64_t k = i; k < n; ++k) dot += double(dy[k] * y[k]);
  const float s = float(dot);
  const __m256 sv = _mm256_set1_ps(s), scv = _mm256_set1_ps(scale);
  for (i = 0; i + 8 <= n; i += 8) {
    __m256i bytes = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(c + i)));
    __m256 masked = _mm256_castsi256_ps(_mm256_cmpgt_epi32(bytes, _mm256_setzero_si256()));
    __m256 g = _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(y + i), _mm256_sub_ps(_mm256_loadu_ps(dy + i), sv)), scv);
    _mm256_storeu_ps(dx + i, _mm256_blendv_ps(g, _mm256_setzero_ps(), masked));
  }
  for (; i < n; ++i) dx[i] = c[i] ? 0.f : y[i] * (dy[i] - s) * scale;
}

void masked_softmax_f32(const float* x, const bool* c, float scale, float fill, float* y, int64_t n) {
  masked_scale_f32(x, c, scale, fill, y, n);
  softmax(y, y, n, c, fill);
}

void gelu_grad_f32(const float* dy, const float* x, float* dx, int64_t n) {
  map_n<2, 1>({dy, x}, {dx}, n,
              [](const __m256* a, __m256* b) { b[0] = gelu_grad_from8(a[0], a[1], erf_scaled8(a[1])); });
}

void gelu_and_grad_f32(const float* dy, const float* x, float* dx, float* y, int64_t n) {
  map_n<2, 2>({dy, x}, {dx, y}, n, [](const __m256* a, __m256* b) {
    __m256 e = erf_scaled8(a[1]);
    b[0] = gelu_grad_from8(a[0], a[1], e);
    b[1] = gelu_from8(a[1], e);
  });
}

// gelu_tanh_t8, gelu_from8 and the tanh form's gradient sixteen lanes at a time: the same operations lane by lane,
// so the same values.
ONNXTRAIN_AVX512 static __m512 gelu_tanh_t16(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.f), x2 = _mm512_mul_ps(x, x);
  const __m512 cubic = _mm512_mul_ps(x, _mm512_fmadd_ps(_mm512_set1_ps(kGeluC), x2, one));
  const __m512 z = _mm512_mul_ps(_mm512_set1_ps(2 * kGeluK), cubic);
  return _mm512_sub_ps(one, _mm512_div_ps(_mm512_set1_ps(2.f), _mm512_add_ps(exp16(z), one)));
}
ONNXTRAIN_AVX512 static __m512 gelu_from16(__m512 x, __m512 t) {
  return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), x), _mm512_add_ps(_mm512_set1_ps(1.f), t));
}
ONNXTRAIN_AVX512 static __m512 gelu_tanh_grad16(__m512 dy, __m512 x, __m512 t) {
  const __m512 half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.f);
  const __m512 inner = _mm512_mul_ps(_mm512_set1_ps(kGeluK),
                                     _mm512_fmadd_ps(_mm512_set1_ps(3 * kGeluC), _mm512_mul_ps(x, x), one));
  const __m512 slope = _mm512_mul_ps(_mm512_mul_ps(half, x), _mm512_mul_ps(_mm512_fnmadd_ps(t, t, one), inner));
  return _mm512_mul_ps(dy, _mm512_fmadd_ps(half, _mm512_add_ps(one, t), slope));
}

// dx = dy GELU'(x) where dx is given, y = GELU(x) where y is (tanh form, t computed once), sixteen at a time (a
// masked tail); each vector read before it is written (dx may be dy, y x).
ONNXTRAIN_AVX512 static void gelu_tanh_avx512(const float* dy, const float* x, float* dx, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = first_lanes(n - i);
    const __m512 xv = _mm512_maskz_loadu_ps(k, x + i), t = gelu_tanh_t16(xv);
    if (dx) _mm512_mask_storeu_ps(dx + i, k, gelu_tanh_grad16(_mm512_maskz_loadu_ps(k, dy + i), xv, t));
    if (y) _mm512_mask_storeu_ps(y + i, k, gelu_from16(xv, t));
  }
}

// d/dx 0.5 x (1 + t) = 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2)
void gelu_tanh_grad_f32(const float* dy, const float* x, float* dx, int64_t n) {
  if (cpu::features().avx512) return gelu_tanh_avx512(dy, x, dx, nullptr, n);
  map_n<2, 1>({dy, x}, {dx}, n, [](const __m256* a, __m256* b) {
    const __m256 x = a[1], t = gelu_tanh_t8(x), half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.f);
    __m256 inner = _mm256_mul_ps(_mm256_set1_ps(kGeluK),
                                 _mm256_fmadd_ps(_mm256_set1_ps(3 * kGeluC), _mm256_mul_ps(x, x), one));
    __m256 slope = _mm256_mul_ps(_mm256_mul_ps(half, x), _mm256_mul_ps(_mm256_fnmadd_ps(t, t, one), inner));
    b[0] = _mm256_mul_ps(a[0], _mm256_fmadd_ps(half, _mm256_add_ps(one, t), slope));
  });
}

void erf_f32(const float* x, float* y, int64_t n) { map8<erf8>(x, y, n); }
void gelu_tanh_f32(const float* x, float* y, int64_t n) {
  if (cpu::features().avx512) return gelu_tanh_avx512(nullptr, x, nullptr, y, n);
  map8<gelu_tanh8>(x, y, n);
}

// Both at once: with AVX-512, t once for both; else a block of GELU at a time into a buffer first (y may be x's
// buffer, which the gradient reads).
void gelu_tanh_and_grad_f32(const float* dy, const float* x, float* dx, float* y, int64_t n) {
  if (cpu::features().avx512) return gelu_tanh_avx512(dy, x, dx, y, n);
  constexpr int64_t kBlock = 256;
  float part[kBlock];
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t m = std::min(kBlock, n - b);
    gelu_tanh_f32(x + b, part, m);
    gelu_tanh_grad_f32(dy + b, x + b, dx + b, m);
    std::copy(part, part + m, y + b);
  }
}
void gelu_f32(const float* x, float* y, int64_t n) { map8<gelu8>(x, y, n); }

}  // namespace onnxtrain::kernels
