// The gradients com.onnxtrain.LinearCrossEntropy forms in forward (outputs 2-4: dX, dW, dB for a loss gradient of
// 1) equal LinearCrossEntropyGrad's for a loss gradient of 1, and its loss and log-sum-exps those of a forward
// without gradients, on both of its paths: dW or dB asked for (blocks of classes after the loss) and dX alone (a
// frozen head, as LoRA's: one pass over blocks of classes), in float32 and bfloat16, with several blocks of
// classes, a bias and ignored targets; and with the scores asked for too (output 5), which the gradients then read
// back in float32 instead of computing them again.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "test_graphs.h"

namespace onnxtrain {
namespace {

constexpr int64_t kRows = 300, kInner = 24, kClasses = 20000;  // 6990 classes a float32 block: three blocks

Tensor random(DType dtype, const std::vector<int64_t>& dims, std::mt19937& rng, float scale) {
  std::normal_distribution<float> d(0, scale);
  Tensor t(dtype, dims);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (dtype == DType::kBFloat16)
      t.data<BFloat16>()[i] = BFloat16(d(rng));
    else
      t.data<float>()[i] = d(rng);
  }
  return t;
}

float at(const Tensor& t, int64_t i) {
  return t.dtype() == DType::kBFloat16 ? float(t.data<BFloat16>()[i]) : t.data<float>()[i];
}

std::vector<Tensor> run(const std::string& op, const std::vector<Tensor>& inputs, const std::vector<bool>& wanted) {
  return test_graphs::run_onnxtrain_node(op, inputs, wanted, {{"ignore_index", int64_t(-100)}});
}

void expect_near(const Tensor& got, const Tensor& want, float tolerance, const std::string& what) {
  ASSERT_EQ(got.dims(), want.dims()) << what;
  float scale = 0;
  for (int64_t i = 0; i < want.numel(); ++i) scale = std::max(scale, std::abs(at(want, i)));
  int64_t off = 0;
  for (int64_t i = 0; i < want.numel(); ++i) off += !(std::abs(at(got, i) - at(want, i)) <= tolerance * scale);
  EXPECT_EQ(off, 0) << what;
}

void check(DType dtype, bool with_dw, bool with_db, bool with_scores = false) {
  std::mt19937 rng(5);
  Tensor x = random(dtype, {3, kRows / 3, kInner}, rng, 1), w = random(dtype, {kClasses, kInner}, rng, 0.3f),
         b = random(dtype, {kClasses}, rng, 0.3f), target(DType::kInt64, {kRows});
  for (int64_t i = 0; i < kRows; ++i) target.data<int64_t>()[i] = i % 7 == 3 ? -100 : (i * 7919) % kClasses;
  auto fwd = run("LinearCrossEntropy", {x, w, b, target}, {true, true, true, with_dw, with_db, with_scores});
  auto plain = run("LinearCrossEntropy", {x, w, b, target}, {true, true});
  Tensor one(DType::kFloat32, {});
  *one.data<float>() = 1;
  auto grads = run("LinearCrossEntropyGrad", {one, x, w, b, target, fwd[1]}, {true, true, true});
  const float tolerance = dtype == DType::kBFloat16 ? 0x1p-7f : 1e-5f;
  const std::string what = std::string(dtype_name(dtype)) + (with_dw ? ", dW" : "") + (with_db ? ", dB" : "") +
                           (with_scores ? ", scores" : "");
  expect_near(fwd[0], plain[0], 1e-6f, "loss, " + what);
  expect_near(fwd[1], plain[1], 1e-6f, "log-sum-exps, " + what);
  expect_near(fwd[2], grads[0], tolerance, "dX, " + what);
  if (with_dw) expect_near(fwd[3], grads[1], tolerance, "dW, " + what);
  if (with_db) expect_near(fwd[4], grads[2], tolerance, "dB, " + what);
}

TEST(LinearCrossEntropyForwardGradients, EqualTheGradientOpsOnBothPaths) {
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    check(dtype, true, true);
    check(dtype, true, true, true);
    check(dtype, false, true);
    check(dtype, false, false);  // the frozen head's one pass
  }
}

}  // namespace
}  // namespace onnxtrain
