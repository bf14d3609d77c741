// The host's forward norms (norm_output_rows.cpp): a LayerNormalization or RMSNormalization of attribute `to`
// bfloat16 writes its float32 result rounded once (bit for bit), sixteen lanes at a time and one element at a time
// alike, rows whose last elements fill no full vector included.
#include <gtest/gtest.h>

#include <cstring>

#include "core/cpu_features.h"
#include "test_graphs.h"

namespace onnxtrain {
namespace {

// Output 0 of the norm `op` of x (rows, n) over its last dim, of attribute `to` where `to` is given.
Tensor norm(const std::string& op, int64_t rows, int64_t n, bool with_bias, DType to) {
  Tensor x = test_graphs::pattern_tensor({rows, n}), w = test_graphs::pattern_tensor({n});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = x.data<float>()[i] * 3 + float(i % 11) * 0.37f;
  std::vector<Tensor> in{x, w};
  if (with_bias) in.push_back(test_graphs::pattern_tensor({n}));
  ir::Attributes at{{"axis", int64_t(-1)}, {"epsilon", 1e-5f}};
  if (to != DType::kFloat32) at["to"] = int64_t(to);
  return test_graphs::run_onnxtrain_node(op, in, {true, false, false}, at)[0];
}

void expect_rounded_once() {
  for (auto [op, bias] : {std::pair<const char*, bool>{"LayerNormalization", true}, {"LayerNormalization", false},
                          {"RMSNormalization", false}})
    for (int64_t n : {40, 576, 7}) {
      SCOPED_TRACE(std::string(op) + (bias ? " with a bias, n " : ", n ") + std::to_string(n) + " on " +
                   cpu::features().str());
      const Tensor f32 = norm(op, 5, n, bias, DType::kFloat32), bf16 = norm(op, 5, n, bias, DType::kBFloat16);
      ASSERT_EQ(bf16.dtype(), DType::kBFloat16);
      for (int64_t i = 0; i < f32.numel(); ++i)
        ASSERT_EQ(bf16.data<BFloat16>()[i].bits, BFloat16(f32.data<float>()[i]).bits) << "at " << i;
    }
}

TEST(NormOutput, Bf16IsTheFloat32ResultRoundedOnce) { expect_rounded_once(); }

TEST(NormOutput, Bf16IsTheFloat32ResultRoundedOnceElementByElement) {
  cpu::restrict_features(false, false);
  expect_rounded_once();
  cpu::restrict_features(true, true);
}

TEST(NormOutput, LanesComputeAsTheLoopOfOneElementAtATime) {
  for (const char* op : {"LayerNormalization", "RMSNormalization"}) {
    const bool bias = std::string(op) == "LayerNormalization";
    const Tensor lanes = norm(op, 9, 100, bias, DType::kFloat32);
    cpu::restrict_features(false, false);
    const Tensor one_at_a_time = norm(op, 9, 100, bias, DType::kFloat32);
    cpu::restrict_features(true, true);
    EXPECT_EQ(0, std::memcmp(lanes.raw(), one_at_a_time.raw(), size_t(lanes.numel()) * 4)) << op;
  }
}

}  // namespace
}  // namespace onnxtrain
