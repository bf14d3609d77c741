// com.onnxtrain.FlashAttention and its gradient in bfloat16 on bf16-exact inputs, against the float32 kernel's
// results on the same values. Where the CPU multiplies bfloat16 natively (flash_attention_bf16.h) the probabilities
// and the scores' gradients are rounded to bf16 for the products: Y, dQ, dK and dV within a few bf16 units of
// float32's, the float32 log-sum-exps to 1e-5. On the float32 copies a CPU without AVX512_BF16 takes (forced),
// every output is float32's rounded, bit for bit. Cases, each on the fused row passes where the CPU has
// AVX512_BF16: grouped-query heads under a causal mask with dropout over tiles of rows and keys; an additive causal
// bias with a padded key; more keys than one tile holds, unmasked, with dropout; a causal mask of a finite fill; and
// random cases of these, each operand (B, H, T, d) or sequence-major (random_cases.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "bf16_tensors.h"
#include "core/cpu_features.h"
#include "random_cases.h"
#include "test_graphs.h"

namespace onnxtrain {
namespace {

Tensor scalar(float v) {
  Tensor t(DType::kFloat32, {});
  *t.data<float>() = v;
  return t;
}

using bf16_tensors::as;
using bf16_tensors::floats;

// Every element of `got` within `tolerance` times the largest magnitude of `want` (0: equal to `want` rounded to
// got's dtype).
void expect_near(const Tensor& got, const Tensor& want, float tolerance, const std::string& what) {
  ASSERT_EQ(got.dims(), want.dims()) << what;
  std::vector<float> g = floats(got), w = floats(as(got.dtype(), want));
  float scale = 0;
  for (float v : floats(want)) scale = std::max(scale, std::abs(v));
  int64_t off = 0;
  for (size_t i = 0; i < g.size(); ++i)
    if (tolerance == 0 ? !(g[i] == w[i]) : !(std::abs(g[i] - w[i]) <= tolerance * scale)) ++off;
  EXPECT_EQ(off, 0) << what << " on " << cpu::features().str() << " (of " << g.size() << ")";
}

struct Case {
  std::string name;
  int64_t heads, kv_heads, tq, tk, d, dv;
  bool causal_mask, causal_bias;
  float dropout, fill = -INFINITY;  // (the mask's)
  std::vector<int64_t> major = {0, 0, 0, 0};  // sequence_major's flags: Q, K, V and Y (and dY) as (B, T, H, d)

  // An operand's dims: (B, H, T, n), or (B, T, H, n) where its flag is set.
  std::vector<int64_t> dims(size_t operand, int64_t heads, int64_t t, int64_t n) const {
    return major[operand] ? std::vector<int64_t>{2, t, heads, n} : std::vector<int64_t>{2, heads, t, n};
  }
  ir::Attributes attributes() const { return {{"kv_groups", heads / kv_heads}, {"sequence_major", major}}; }
};

// The forward's inputs (Q, K, V, scale, cond, fill, ratio, training, bias) and dY, in float32.
std::vector<Tensor> inputs(const Case& k, std::mt19937& rng, Tensor* dy) {
  std::vector<Tensor> in{bf16_tensors::random_exact(k.dims(0, k.heads, k.tq, k.d), rng),
                         bf16_tensors::random_exact(k.dims(1, k.kv_heads, k.tk, k.d), rng),
                         bf16_tensors::random_exact(k.dims(2, k.kv_heads, k.tk, k.dv), rng),
                         scalar(1 / std::sqrt(float(k.d))), {}, {}, {}, {}, {}};
  *dy = bf16_tensors::random_exact(k.dims(3, k.heads, k.tq, k.dv), rng);
  const int64_t shift = k.tk - k.tq;  // (query r sees keys up to r + shift)
  if (k.causal_mask) {
    in[4] = Tensor(DType::kBool, {k.tq, k.tk});
    for (int64_t r = 0; r < k.tq; ++r)
      for (int64_t j = 0; j < k.tk; ++j) in[4].data<bool>()[r * k.tk + j] = j > r + shift;
    in[5] = scalar(k.fill);
  }
  if (k.dropout > 0) in[6] = scalar(k.dropout), in[7] = Tensor(DType::kBool, {}), *in[7].data<bool>() = true;
  if (k.causal_bias) {
    in[8] = Tensor(DType::kFloat32, {2, 1, k.tq, k.tk});
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t r = 0; r < k.tq; ++r)
        for (int64_t j = 0; j < k.tk; ++j)
          in[8].data<float>()[(b * k.tq + r) * k.tk + j] = j > r + shift || (b == 1 && j == 3) ? -INFINITY : 0.f;
  }
  return in;
}

// The forward in `dtype` (Q, K, V and the bias in it; the scalars float32): Y, LSE.
std::vector<Tensor> forward(const Case& k, DType dtype, const std::vector<Tensor>& in) {
  std::vector<Tensor> fed;
  for (size_t i = 0; i < in.size(); ++i) fed.push_back(i < 3 || i == 8 ? as(dtype, in[i]) : in[i]);
  return test_graphs::run_onnxtrain_node("FlashAttention", fed, {true, true}, k.attributes());
}

// The gradient in `dtype` of the forward that gave y (bf16-exact, as float32) and lse: dQ, dK, dV.
std::vector<Tensor> gradient(const Case& k, DType dtype, const std::vector<Tensor>& in, const Tensor& dy,
                             const Tensor& y, const Tensor& lse) {
  std::vector<Tensor> fed{as(dtype, dy), as(dtype, in[0]), as(dtype, in[1]), as(dtype, in[2]), as(dtype, y), lse};
  for (size_t i = 3; i < in.size(); ++i) fed.push_back(i == 8 ? as(dtype, in[i]) : in[i]);
  return test_graphs::run_onnxtrain_node("FlashAttentionGrad", fed, {true, true, true}, k.attributes());
}

Tensor as_float32(const Tensor& t) {
  Tensor r(DType::kFloat32, t.dims());
  std::vector<float> v = floats(t);
  std::copy(v.begin(), v.end(), r.data<float>());
  return r;
}

void check(const Case& k, bool native) {
  std::mt19937 rng(7);
  Tensor dy;
  const std::vector<Tensor> in = inputs(k, rng, &dy);
  const std::vector<Tensor> want = forward(k, DType::kFloat32, in), got = forward(k, DType::kBFloat16, in);
  ASSERT_EQ(got[0].dtype(), DType::kBFloat16);
  ASSERT_EQ(got[1].dtype(), DType::kFloat32);
  expect_near(got[0], want[0], native ? 0x1p-6f : 0, k.name + ": Y");
  expect_near(got[1], want[1], native ? 1e-5f : 0, k.name + ": LSE");
  const Tensor y = as_float32(got[0]);
  const std::vector<Tensor> dwant = gradient(k, DType::kFloat32, in, dy, y, got[1]),
                            dgot = gradient(k, DType::kBFloat16, in, dy, y, got[1]);
  const char* names[] = {"dQ", "dK", "dV"};
  for (size_t i = 0; i < 3; ++i) expect_near(dgot[i], dwant[i], native ? 0x1p-6f : 0, k.name + ": " + names[i]);
}

void check(bool native) {
  const Case cases[] = {
      {"grouped heads, causal mask, dropout", 4, 2, 150, 150, 32, 16, true, false, 0.2f},
      {"causal bias, a padded key", 2, 2, 130, 200, 16, 24, false, true, 0},
      {"more keys than a tile, dropout", 3, 1, 70, 600, 16, 8, false, false, 0.3f},
      // (masked scores that keep a share of the probability: each is the fill, its gradient 0)
      {"causal mask of a finite fill, dropout", 2, 2, 100, 100, 16, 16, true, false, 0.1f, -2.f},
  };
  for (const Case& k : cases) check(k, native);
}

// A case drawn from `d` (random_cases.h): heads and grouped heads, rows, keys and head sizes, a causal mask (a
// fill of -inf or a finite one) or a causal bias, dropout, each operand (B, H, T, d) or sequence-major.
Case random_case(testing::Draws& d) {
  Case k{"random case", 1 + d.below(4), 1, 1 + d.below(200), 1 + d.below(300), 1 + d.below(128), 1 + d.below(128),
         d.below(2) == 0, false, d.below(3) ? 0.f : 0.1f + 0.1f * float(d.below(3))};
  do k.kv_heads = 1 + d.below(k.heads);
  while (k.heads % k.kv_heads);
  k.causal_bias = !k.causal_mask && d.below(2);
  if (k.causal_mask && d.below(2)) k.fill = -1.5f;
  if (k.causal_mask || k.causal_bias) k.tk = std::max(k.tk, k.tq);  // (no row masked whole: NaN, as Softmax gives)
  for (int64_t& flag : k.major) flag = d.below(2);
  k.name = "heads " + std::to_string(k.heads) + "/" + std::to_string(k.kv_heads) + ", tq " + std::to_string(k.tq) +
           ", tk " + std::to_string(k.tk) + ", d " + std::to_string(k.d) + ", dv " + std::to_string(k.dv) +
           (k.causal_mask ? ", causal mask of " + std::to_string(k.fill) : k.causal_bias ? ", causal bias" : "") +
           ", dropout " + std::to_string(k.dropout) + ", sequence-major " + std::to_string(k.major[0]) +
           std::to_string(k.major[1]) + std::to_string(k.major[2]) + std::to_string(k.major[3]);
  return k;
}

TEST(Bf16FlashAttention, RandomCasesAsFloat32OnThisCpuAndWithoutAvx512Bf16) {
  testing::for_random_seeds(4, [](testing::Draws& d) {
    const Case k = random_case(d);
    if (cpu::features().avx512_bf16) check(k, true);
    cpu::restrict_features(true, false);
    check(k, false);
    cpu::restrict_features(true, true);
  });
}

TEST(Bf16FlashAttention, MatchesFloat32WithinBf16RoundingOnThisCpu) {
  if (!cpu::features().avx512_bf16) GTEST_SKIP() << "this CPU has no AVX512_BF16: the native path does not run";
  check(true);
}

TEST(Bf16FlashAttention, IsFloat32RoundedWithoutAvx512Bf16) {
  cpu::restrict_features(true, false);
  check(false);
  cpu::restrict_features(true, true);
}

}  // namespace
}  // namespace onnxtrain
