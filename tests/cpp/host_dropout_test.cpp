// The host's com.onnxtrain.Dropout (float32 and bfloat16, its output in the input's dtype or the other through
// attribute `to`, with and without the residual it adds): sixteen elements at a time with AVX-512 and one at a time
// on a CPU without it, the same output and mask bit for bit, every rounding to bf16 made alike.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "bf16_tensors.h"
#include "core/cpu_features.h"
#include "test_graphs.h"

namespace onnxtrain {
namespace {

std::vector<Tensor> dropout(DType in, DType out, bool residual) {
  std::mt19937 rng(5);
  const int64_t n = 1000;  // (chunks of 256 and a tail of 8)
  Tensor ratio(DType::kFloat32, {}), training(DType::kBool, {});
  *ratio.data<float>() = 0.3f, *training.data<bool>() = true;
  Tensor x(DType::kFloat32, {n});  // (float32 values bf16 does not hold: a float32 input is rounded to bf16 first
  std::normal_distribution<float> normal(0, 3);  // where the output is bf16)
  for (int64_t i = 0; i < n; ++i) x.data<float>()[i] = normal(rng);
  std::vector<Tensor> inputs{bf16_tensors::as(in, x), ratio, training};
  if (residual) inputs.push_back(bf16_tensors::as(out, bf16_tensors::random_exact({n}, rng)));
  ir::Attributes attrs{{"seed", int64_t(9)}};
  if (in != out) attrs["to"] = int64_t(out);
  return test_graphs::run_onnxtrain_node("Dropout", inputs, {true, true}, attrs);
}

TEST(HostDropout, SixteenAtATimeIsOneAtATime) {
  if (!cpu::features().avx512) GTEST_SKIP() << "this CPU has no AVX-512: one path only";
  for (DType in : {DType::kFloat32, DType::kBFloat16})
    for (DType out : {DType::kFloat32, DType::kBFloat16})
      for (bool residual : {false, true}) {
        const std::vector<Tensor> wide = dropout(in, out, residual);
        cpu::restrict_features(false, false);
        const std::vector<Tensor> narrow = dropout(in, out, residual);
        cpu::restrict_features(true, true);
        ASSERT_EQ(wide[0].dtype(), out);
        const std::string what = dtype_name(in) + " to " + dtype_name(out) + (residual ? ", residual" : "");
        EXPECT_EQ(std::memcmp(wide[0].raw(), narrow[0].raw(), wide[0].nbytes()), 0) << what;
        EXPECT_EQ(std::memcmp(wide[1].raw(), narrow[1].raw(), wide[1].nbytes()), 0) << what;
      }
}

}  // namespace
}  // namespace onnxtrain
