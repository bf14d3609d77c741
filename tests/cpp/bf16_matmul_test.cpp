// The bfloat16 matrix products (MatMul, FusedMatMul, Gemm, Linear) against their float32 results rounded to
// bfloat16, on the GPT's shapes, attention tiles, transposed and broadcast operands: through oneDNN's bf16 GEMM
// where the CPU has AVX512_BF16, and on the float32 path a CPU without it takes (forced).
#include <gtest/gtest.h>

#include <dnnl.hpp>

#include <cmath>
#include <cstdlib>
#include <random>

#include "core/cpu_features.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/run_node.h"
#include "ops/bind.h"
#include "test_graphs.h"

namespace onnxtrain {
namespace {

struct Case {
  std::string domain, op;
  std::vector<std::vector<int64_t>> inputs;
  ir::Attributes attrs;
};

Tensor random_tensor(const std::vector<int64_t>& dims, std::mt19937& rng) {
  std::normal_distribution<float> d(0, 1);
  Tensor t(DType::kFloat32, dims);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = float(BFloat16(d(rng)));  // exact in bf16
  return t;
}

Tensor to_bf16(const Tensor& t) {
  Tensor r(DType::kBFloat16, t.dims());
  for (int64_t i = 0; i < t.numel(); ++i) r.data<BFloat16>()[i] = BFloat16(t.data<float>()[i]);
  return r;
}

// The node's output in `dtype` for inputs given in float32.
Tensor run(const Case& k, DType dtype, const std::vector<Tensor>& inputs) {
  ir::Graph g;
  g.opsets[""] = 20;
  g.opsets["com.onnxtrain"] = 1;
  std::vector<ir::Value*> in;
  for (size_t i = 0; i < inputs.size(); ++i)
    in.push_back(test_graphs::add_input(g, "x" + std::to_string(i), dtype, const_shape(inputs[i].dims())));
  ir::Value* y = g.add_value("y");
  ir::Node* n = g.add_node(k.op, in, {y}, k.attrs);
  n->domain = k.domain;
  n->opset = k.domain.empty() ? 20 : 1;
  ops::bind_graph(g);
  std::vector<Tensor> fed;
  for (auto& t : inputs) fed.push_back(dtype == DType::kBFloat16 ? to_bf16(t) : t);
  std::vector<const Tensor*> ptrs;
  for (auto& t : fed) ptrs.push_back(&t);
  return kernels::run_node(*n, ptrs)[0];
}

void check(const Case& k) {
  std::mt19937 rng(7);
  std::vector<Tensor> inputs;
  for (auto& d : k.inputs) inputs.push_back(random_tensor(d, rng));
  Tensor want = run(k, DType::kFloat32, inputs), got = run(k, DType::kBFloat16, inputs);
  ASSERT_EQ(got.dtype(), DType::kBFloat16);
  ASSERT_EQ(got.dims(), want.dims());
  int64_t off = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    float w = float(BFloat16(want.data<float>()[i])), g = float(got.data<BFloat16>()[i]);
    // float32 sums in another order differ in their last bits: at most one bf16 unit after rounding.
    if (std::abs(g - w) > std::abs(w) * 0x1p-7f + 1e-3f) ++off;
  }
  EXPECT_EQ(off, 0) << k.op << " on " << cpu::features().str();
}

std::vector<Case> cases() {
  ir::Attributes tb{{"transB", int64_t(1)}}, ta{{"transA", int64_t(1)}};
  return {
      {"", "MatMul", {{1024, 1024}, {1024, 1024}}, {}},                          // the benchmark's square product
      {"", "MatMul", {{8, 128, 384}, {384, 1152}}, {}},                          // GPT: qkv
      {"", "MatMul", {{8, 6, 128, 64}, {8, 6, 64, 128}}, {}},                    // attention scores
      {"", "MatMul", {{8, 6, 128, 128}, {8, 6, 128, 64}}, {}},                   // attention output
      {"", "MatMul", {{3, 1, 5, 7}, {1, 4, 7, 6}}, {}},                          // batch dims broadcast both ways
      {"", "MatMul", {{5, 7}, {2, 3, 7, 4}}, {}},                                // A shared by every batch
      {"com.onnxtrain", "FusedMatMul", {{8, 6, 128, 64}, {8, 6, 128, 64}}, tb},  // Q K^T
      {"com.onnxtrain", "FusedMatMul", {{8, 6, 128, 64}, {8, 6, 128, 32}}, ta},  // dV = P^T dY
      {"com.onnxtrain", "Linear", {{8, 128, 384}, {1536, 384}, {1536}}, {}},     // GPT: MLP, with bias
      {"", "Gemm", {{16, 32}, {24, 32}, {24}}, {{"transB", int64_t(1)}, {"alpha", 0.5f}, {"beta", 2.0f}}},
      // Between 48 and 64 columns, where oneDNN 2.6's AMX kernels split among threads compute wrong products.
      {"com.onnxtrain", "Linear", {{2, 7, 16}, {50, 16}}, {}},                  // a tiny LM's head
      {"", "MatMul", {{3, 20, 32}, {32, 63}}, {}},
      {"com.onnxtrain", "FusedMatMul", {{2, 32, 64}, {2, 49, 64}}, tb},
      // Odd inner lengths, where oneDNN 2.6's AMX kernels on more than one thread stop on an illegal instruction
      // (63, and from about 1,700 on: attention over an odd number of keys, a weight's gradient over odd tokens).
      {"", "MatMul", {{33, 63}, {63, 16}}, {}},
      {"com.onnxtrain", "FusedMatMul", {{94, 63}, {290, 63}}, tb},
      {"", "MatMul", {{94, 2047}, {2047, 129}}, {}},
  };
}

TEST(Bf16MatMul, MatchesFloat32RoundedOnThisCpu) {
  for (const Case& k : cases()) check(k);
}

TEST(Bf16MatMul, MatchesFloat32RoundedWithoutAvx512Bf16) {
  cpu::restrict_features(true, false);
  for (const Case& k : cases()) check(k);
  cpu::restrict_features(false, false);
  for (const Case& k : cases()) check(k);
  cpu::restrict_features(true, true);
}

// A run whose shapes vary (rows here) keeps no more primitives than oneDNN's cache would (each holds its compiled
// kernel), and a product whose primitive was let go computes as before when made again.
TEST(Bf16MatMul, KeepsNoMorePrimitivesThanOneDnnsCache) {
  if (!kernels::gemm_bf16_native()) GTEST_SKIP() << "no AVX512_BF16 on " << cpu::features().str();
  check({"", "MatMul", {{2, 32}, {32, 24}}, {}});  // (the first product sets onnxtrain's capacity: after it, ours)
  const int capacity = dnnl::get_primitive_cache_capacity();
  if (!std::getenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY") && !std::getenv("DNNL_PRIMITIVE_CACHE_CAPACITY"))
    EXPECT_EQ(capacity, 256);  // (onnxtrain's default, below oneDNN's 1024)
  dnnl::set_primitive_cache_capacity(3);
  for (int round = 0; round < 2; ++round)
    for (int64_t rows = 1001; rows <= 1010; ++rows) {
      check({"", "MatMul", {{rows, 32}, {32, 24}}, {}});
      EXPECT_LE(kernels::gemm_bf16_primitives(), 3u) << rows << " rows";
    }
  dnnl::set_primitive_cache_capacity(capacity);
}

}  // namespace
}  // namespace onnxtrain
