// com.onnxtrain.LinearCrossEntropy keeps its precision where a row's target is near certain (1 - p from 7e-3 down to
// 1e-5, logits about 60): each row's loss and every gradient within 2e-5 of the same op computed in float64, row by
// row. A log-sum-exp held as one float32 number (lse = max + log(sum)) loses ulp(lse) ~ 4e-6 in lse - s_target and
// exp(s - lse): a per-token loss of 1e-5 off by a third, and its gradient alike (PyTorch's float32 cross_entropy,
// whose sum = fl(1 + (1 - p)) rounds 1 - p away, is 3e-2 off in both here). Checked on each path: the per-row loss
// and LinearCrossEntropyGrad (reduction "none"), the gradients forward forms for a loss of one number (blocks of
// classes, several of them), and a frozen head's dX (the loss pass's one pass).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "test_graphs.h"

namespace onnxtrain {
namespace {

constexpr int64_t kRows = 300, kInner = 16, kClasses = 20000;  // 6990 classes a float32 block: three blocks

struct Head {
  Tensor x, w, target;
};

// Scores exact in float32, so that float32 and float64 start from the same numbers: row i's target t_i among the
// first kInner - 1 classes, X[i] = a_i e_{t_i} + 32 e_last with a_i an integer in [24, 36]; W[c][c] = 1, W[c][last]
// = 1 (every score 32 more), W's other entries multiples of 1/16 in [-1, 0.5]. The target's score is the row's
// largest, 56 to 68, the others at least a_i / 2 below it: 1 - p_target spans about 1e-2 to 1e-5.
Head near_certain(DType dtype) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> sixteenths(-16, 8), scale(24, 36);
  Head h{Tensor(dtype, {kRows, kInner}), Tensor(dtype, {kClasses, kInner}), Tensor(DType::kInt64, {kRows})};
  auto set = [dtype](Tensor& t, int64_t i, double v) {
    if (dtype == DType::kFloat64)
      t.data<double>()[i] = v;
    else
      t.data<float>()[i] = float(v);
  };
  for (int64_t c = 0; c < kClasses; ++c)
    for (int64_t k = 0; k < kInner; ++k)
      set(h.w, c * kInner + k, c == k || k == kInner - 1 ? 1.0 : sixteenths(rng) / 16.0);
  for (int64_t i = 0; i < kRows; ++i) {
    const int64_t t = i % (kInner - 1);
    h.target.data<int64_t>()[i] = t;
    const int a = scale(rng);
    for (int64_t k = 0; k < kInner; ++k) set(h.x, i * kInner + k, k == t ? a : k == kInner - 1 ? 32.0 : 0.0);
  }
  return h;
}

double at(const Tensor& t, int64_t i) {
  return t.dtype() == DType::kFloat64 ? t.data<double>()[i] : double(t.data<float>()[i]);
}

// Row by row (rows of `width` numbers): the largest error relative to the row's largest magnitude in float64, or
// to `floor` where that is smaller.
double worst_error(const Tensor& got, const Tensor& want, int64_t width, double floor) {
  EXPECT_EQ(got.numel(), want.numel());
  double worst = 0;
  for (int64_t r = 0; r * width < want.numel(); ++r) {
    double scale = floor;
    for (int64_t j = 0; j < width; ++j) scale = std::max(scale, std::abs(at(want, r * width + j)));
    for (int64_t j = 0; j < width; ++j)
      worst = std::max(worst, std::abs(at(got, r * width + j) - at(want, r * width + j)) / scale);
  }
  return worst;
}

// Within 2e-5 of each row's largest (or of 1e-4): float32's one log-sum-exp was 4e-2 off in the per-row losses and
// dX, 6e-4 in dW and 7e-5 in the summed loss; each is 1e-6 to 1e-8 off with the row statistics.
void expect_near(const Tensor& got, const Tensor& want, int64_t width, const std::string& what) {
  EXPECT_LE(worst_error(got, want, width, 1e-4), 2e-5) << what;
}

std::vector<Tensor> run(const std::string& op, const std::vector<Tensor>& inputs, const std::vector<bool>& wanted,
                        const std::string& reduction) {
  return test_graphs::run_onnxtrain_node(op, inputs, wanted, {{"reduction", reduction}});
}

TEST(LinearCrossEntropyPrecision, NearCertainRowsKeepTheirLossAndGradientsAsFloat64Has) {
  const Head h = near_certain(DType::kFloat32), h64 = near_certain(DType::kFloat64);
  // Per-row losses, and LinearCrossEntropyGrad's dX and dW for a loss gradient of 1 a row.
  const auto rows = run("LinearCrossEntropy", {h.x, h.w, Tensor(), h.target}, {true, true}, "none");
  const auto rows64 = run("LinearCrossEntropy", {h64.x, h64.w, Tensor(), h64.target}, {true, true}, "none");
  expect_near(rows[0], rows64[0], 1, "the per-row losses");
  Tensor ones(DType::kFloat32, {kRows}), ones64(DType::kFloat64, {kRows});
  std::fill_n(ones.data<float>(), kRows, 1.f);
  std::fill_n(ones64.data<double>(), kRows, 1.0);
  const auto grads = run("LinearCrossEntropyGrad", {ones, h.x, h.w, Tensor(), h.target, rows[1]}, {true, true}, "none");
  const auto grads64 =
      run("LinearCrossEntropyGrad", {ones64, h64.x, h64.w, Tensor(), h64.target, rows64[1]}, {true, true}, "none");
  expect_near(grads[0], grads64[0], kInner, "LinearCrossEntropyGrad's dX");
  expect_near(grads[1], grads64[1], kInner, "LinearCrossEntropyGrad's dW");
  // The gradients formed in forward for a summed loss: dX and dW by blocks of classes, then a frozen head's dX.
  for (bool frozen : {false, true}) {
    const std::vector<bool> wanted{true, false, true, !frozen};
    const auto fwd = run("LinearCrossEntropy", {h.x, h.w, Tensor(), h.target}, wanted, "sum");
    const auto fwd64 = run("LinearCrossEntropy", {h64.x, h64.w, Tensor(), h64.target}, wanted, "sum");
    const std::string path = frozen ? "a frozen head's forward " : "forward's ";
    expect_near(fwd[0], fwd64[0], 1, path + "summed loss");
    expect_near(fwd[2], fwd64[2], kInner, path + "dX");
    if (!frozen) expect_near(fwd[3], fwd64[3], kInner, path + "dW");
  }
}

}  // namespace
}  // namespace onnxtrain
