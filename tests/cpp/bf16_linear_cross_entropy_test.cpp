// com.onnxtrain.LinearCrossEntropy and its gradient in bfloat16 (autocast's head and loss) on bf16-exact inputs:
// the float32 loss and log-sum-exps those of the scores rounded to bf16, as autocast's Linear writes them (a
// reference in double here), to 1e-5; dX, dW and dB within a few bf16 units of float32's (the bf16 path rounds the
// scores, and each block's score gradient to bf16 for its GEMMs, as autocast rounds the scores' gradient). Several
// blocks of rows, a bias, ignored targets; through oneDNN's bf16 GEMM where the CPU has AVX512_BF16, and on the
// float32 copies a CPU without it takes (forced), which round the scores alike.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "bf16_tensors.h"
#include "core/cpu_features.h"
#include "test_graphs.h"

namespace onnxtrain {
namespace {

constexpr int64_t kRows = 600, kInner = 48, kClasses = 8192;  // 256 rows a block: three blocks

using bf16_tensors::as;
using bf16_tensors::floats;

// The node `op` of com.onnxtrain on `inputs` (float32 ones given in `dtype` where `low` marks them), its outputs.
std::vector<Tensor> run(const std::string& op, DType dtype, const std::vector<Tensor>& inputs,
                        const std::vector<bool>& low, size_t outputs) {
  std::vector<Tensor> fed;
  for (size_t i = 0; i < inputs.size(); ++i) fed.push_back(low[i] ? as(dtype, inputs[i]) : inputs[i]);
  return test_graphs::run_onnxtrain_node(op, fed, std::vector<bool>(outputs, true), {{"ignore_index", int64_t(-100)}});
}

// Every element of `got` within `tolerance` times the largest magnitude of `want`.
void expect_near(const Tensor& got, const Tensor& want, float tolerance, const std::string& what) {
  ASSERT_EQ(got.dims(), want.dims()) << what;
  std::vector<float> g = floats(got), w = floats(want);
  float scale = 0;
  for (float v : w) scale = std::max(scale, std::abs(v));
  int64_t off = 0;
  for (size_t i = 0; i < g.size(); ++i)
    if (!(std::abs(g[i] - w[i]) <= tolerance * scale)) ++off;
  EXPECT_EQ(off, 0) << what << " on " << cpu::features().str();
}

// The mean loss and each row's log-sum-exp of the scores X W^T + B rounded to bf16, in double.
std::pair<Tensor, Tensor> rounded_reference(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& target) {
  Tensor loss(DType::kFloat32, {}), lse(DType::kFloat32, {kRows});
  std::vector<double> row(kClasses);
  double total = 0;
  int64_t valid = 0;
  for (int64_t i = 0; i < kRows; ++i) {
    double top = -INFINITY, sum = 0;
    for (int64_t j = 0; j < kClasses; ++j) {
      double s = b.data<float>()[j];
      for (int64_t k = 0; k < kInner; ++k)
        s += double(x.data<float>()[i * kInner + k]) * w.data<float>()[j * kInner + k];
      top = std::max(top, row[size_t(j)] = float(BFloat16(float(s))));
    }
    for (double s : row) sum += std::exp(s - top);
    lse.data<float>()[i] = float(top + std::log(sum));
    const int64_t t = target.data<int64_t>()[i];
    if (t == -100) continue;
    total += top + std::log(sum) - row[size_t(t)];
    ++valid;
  }
  *loss.data<float>() = float(total / double(valid));
  return {loss, lse};
}

void check() {
  std::mt19937 rng(3);
  using bf16_tensors::random_exact;
  Tensor x = random_exact({2, kRows / 2, kInner}, rng, 1), w = random_exact({kClasses, kInner}, rng, 0.2f),
         b = random_exact({kClasses}, rng, 0.2f), target(DType::kInt64, {kRows});
  for (int64_t i = 0; i < kRows; ++i) target.data<int64_t>()[i] = i % 9 == 4 ? -100 : (i * 977) % kClasses;
  const std::vector<bool> low{true, true, true, false};
  auto want = run("LinearCrossEntropy", DType::kFloat32, {x, w, b, target}, low, 2);
  auto got = run("LinearCrossEntropy", DType::kBFloat16, {x, w, b, target}, low, 2);
  ASSERT_EQ(got[0].dtype(), DType::kFloat32);
  const auto [loss, lse] = rounded_reference(x, w, b, target);
  expect_near(got[0], loss, 1e-5f, "loss");
  expect_near(got[1], lse, 1e-5f, "log-sum-exps");

  Tensor dloss(DType::kFloat32, {});
  *dloss.data<float>() = 1.5f;
  const std::vector<bool> grad_low{false, true, true, true, false, false};
  auto dwant = run("LinearCrossEntropyGrad", DType::kFloat32, {dloss, x, w, b, target, want[1]}, grad_low, 3);
  auto dgot = run("LinearCrossEntropyGrad", DType::kBFloat16, {dloss, x, w, b, target, got[1]}, grad_low, 3);
  ASSERT_EQ(dgot[0].dtype(), DType::kBFloat16);
  const char* names[] = {"dX", "dW", "dB"};
  for (size_t i = 0; i < 3; ++i) expect_near(dgot[i], dwant[i], 0x1p-6f, names[i]);
}

TEST(Bf16LinearCrossEntropy, MatchesItsScoresRoundedToBf16OnThisCpu) { check(); }

TEST(Bf16LinearCrossEntropy, MatchesItsScoresRoundedToBf16WithoutAvx512Bf16) {
  cpu::restrict_features(true, false);
  check();
  cpu::restrict_features(false, false);
  check();
  cpu::restrict_features(true, true);
}

}  // namespace
}  // namespace onnxtrain
