// The CUDA backend against the CPU kernels: without a GPU (or without CUDA in the build) a CUDA device is refused
// with a clear error and the GPU tests skip; with one, single nodes and an MLP's training run on it as on the CPU,
// and Dropout draws the CPU's mask bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>

#include "core/allocator.h"
#include "onnxtrain/session.h"
#include "onnxtrain/training_session.h"
#include "bf16_tensors.h"
#include "runtime/session_impl.h"
#include "test_graphs.h"

namespace onnxtrain {
namespace {

constexpr Device kGpu = cuda_device(0);

bool have_gpu() {
  try {
    CachingAllocator::of(kGpu);
    return true;
  } catch (const UnsupportedError&) {
    return false;
  }
}

#define SKIP_WITHOUT_GPU() \
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device (or a build without CUDA)"

Tensor to_gpu(const Tensor& t) { return t.clone(&CachingAllocator::of(kGpu)); }
Tensor to_host(const Tensor& t) { return t.clone(&CachingAllocator::global()); }

Tensor random_tensor(DType dtype, std::vector<int64_t> dims, uint32_t seed) {
  Tensor f(DType::kFloat32, dims);
  for (int64_t i = 0; i < f.numel(); ++i) {
    seed = seed * 1664525u + 1013904223u;
    f.data<float>()[i] = float(seed >> 8) / float(1 << 24) * 4.f - 2.f;
  }
  if (dtype == DType::kFloat32) return f;
  Tensor t(dtype, dims);
  for (int64_t i = 0; i < f.numel(); ++i) {
    if (dtype == DType::kBFloat16) t.data<BFloat16>()[i] = BFloat16(f.data<float>()[i]);
    if (dtype == DType::kFloat16) t.data<Half>()[i] = Half(f.data<float>()[i]);
  }
  return t;
}

// One node of `op` over inputs named i0, i1, ... (an undefined tensor: the input left out), run by an inference
// session on `device`: its first `outputs` outputs, those `wanted` marks where given. An op of onnxtrain's own domain
// is named "com.onnxtrain.<op>".
std::map<std::string, Tensor> run_one(Device device, const std::string& op, const std::vector<Tensor>& inputs,
                                      ir::Attributes attrs, size_t outputs = 1, std::vector<bool> wanted = {}) {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 20;
  g->opsets["com.onnxtrain"] = 1;
  const std::string own = "com.onnxtrain.";
  const bool ours = op.rfind(own, 0) == 0;
  std::vector<ir::Value*> in;
  std::map<std::string, Tensor> feeds;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) {
      in.push_back(nullptr);
      continue;
    }
    std::string name = "i" + std::to_string(i);
    Shape shape;
    for (int64_t d : inputs[i].dims()) shape.push_back(Dim(d));
    in.push_back(test_graphs::add_input(*g, name, inputs[i].dtype(), shape));
    feeds[name] = device == kCpu ? inputs[i] : to_gpu(inputs[i]);
  }
  std::vector<ir::Value*> out;
  for (size_t i = 0; i < outputs; ++i)
    out.push_back(wanted.empty() || wanted[i] ? g->add_value("o" + std::to_string(i)) : nullptr);
  ir::Node* node = g->add_node(ours ? op.substr(own.size()) : op, in, out, std::move(attrs));
  node->opset = ours ? 1 : 20;
  if (ours) node->domain = "com.onnxtrain";
  for (ir::Value* v : out)
    if (v) g->outputs.push_back(v);
  SessionOptions options;
  options.device = device;
  Session s = inference_session(std::move(g), options);
  auto r = s.run(feeds);
  for (auto& [name, t] : r) {
    EXPECT_TRUE(t.device() == device) << op << " output " << name << " on " << t.device().str();
    t = to_host(t);
  }
  return r;
}

// The node on the GPU against the node on the CPU: within `rtol` of the largest output (sums in another order).
void expect_like_cpu(const std::string& op, const std::vector<Tensor>& inputs, ir::Attributes attrs = {},
                     double rtol = 1e-5, size_t outputs = 1, const std::vector<bool>& wanted = {}) {
  auto want = run_one(kCpu, op, inputs, attrs, outputs, wanted);
  auto got = run_one(kGpu, op, inputs, attrs, outputs, wanted);
  for (auto& [name, w] : want) {
    const Tensor& g = got.at(name);
    ASSERT_EQ(g.dims(), w.dims()) << op;
    ASSERT_EQ(g.dtype(), w.dtype()) << op;
    auto gv = g.to_double(), wv = w.to_double();
    double scale = 0;
    for (double v : wv) scale = std::max(scale, std::abs(v));
    for (size_t i = 0; i < wv.size(); ++i) {
      if (std::isinf(wv[i]) && gv[i] == wv[i]) continue;
      ASSERT_NEAR(gv[i], wv[i], rtol * std::max(scale, 1.0))
          << op << " output " << name << " " << dtype_name(w.dtype()) << " at " << i;
    }
  }
}

TEST(Cuda, WithoutADeviceItIsRefusedClearly) {
  if (have_gpu()) GTEST_SKIP() << "a CUDA device is here";
  try {
    CachingAllocator::of(kGpu);
    FAIL() << "no error";
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_device("gpu"), InputError);
  EXPECT_TRUE(parse_device("cuda:3") == cuda_device(3));
}

TEST(Cuda, NodesComputeAsOnTheCpu) {
  SKIP_WITHOUT_GPU();
  for (DType t : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    const double tol = t == DType::kFloat32 ? 1e-5 : 1e-2;
    Tensor a = random_tensor(t, {3, 1, 5, 7}, 1), b = random_tensor(t, {4, 1, 7}, 2);
    for (const char* op : {"Add", "Sub", "Mul", "Div", "Greater"}) expect_like_cpu(op, {a, b}, {}, tol);
    Tensor same = random_tensor(t, {3, 1, 5, 7}, 8);  // one shape: packs of 16 bytes, and a tail past the last one
    for (const char* op : {"Add", "Mul", "Greater"}) expect_like_cpu(op, {a, same}, {}, tol);
    for (DType to : {DType::kFloat32, DType::kBFloat16, DType::kFloat16, DType::kInt64})
      expect_like_cpu("Cast", {a}, {{"to", int64_t(to)}}, tol);  // (an ONNX code)
    for (const char* op : {"Relu", "Exp", "Tanh", "Sigmoid", "Neg", "Erf"}) expect_like_cpu(op, {a}, {}, tol);
    expect_like_cpu("Gelu", {a}, {{"approximate", std::string("tanh")}}, tol);
    expect_like_cpu("Softmax", {a}, {{"axis", int64_t(2)}}, tol);
    expect_like_cpu("LogSoftmax", {a}, {{"axis", int64_t(-1)}}, tol);
    expect_like_cpu("Transpose", {a}, {{"perm", std::vector<int64_t>{2, 0, 3, 1}}});
    expect_like_cpu("MatMul", {random_tensor(t, {2, 1, 33, 40}, 3), random_tensor(t, {3, 40, 17}, 4)}, {}, tol);
    expect_like_cpu("Gemm", {random_tensor(t, {40, 33}, 5), random_tensor(t, {17, 40}, 6), random_tensor(t, {17}, 7)},
                    {{"transA", int64_t(1)}, {"transB", int64_t(1)}, {"alpha", 0.5f}, {"beta", 2.f}}, tol);
  }
}

// The products cuBLASLt takes (kernels/cuda/lt_gemm.cpp): plain and transposed operands, a batch of one stride per
// operand (0: broadcast), a bias row (the bias epilogue) and a whole base matrix, large enough for tensor cores.
TEST(Cuda, ProductsThroughCublasLtComputeAsOnTheCpu) {
  SKIP_WITHOUT_GPU();
  for (DType t : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    const double tol = t == DType::kFloat32 ? 1e-5 : 1e-2;
    Tensor a = random_tensor(t, {3, 33, 40}, 41), b = random_tensor(t, {3, 40, 17}, 42);
    expect_like_cpu("MatMul", {random_tensor(t, {33, 40}, 43), random_tensor(t, {40, 17}, 44)}, {}, tol);
    expect_like_cpu("MatMul", {a, b}, {}, tol);
    expect_like_cpu("MatMul", {a, random_tensor(t, {40, 17}, 45)}, {}, tol);
    expect_like_cpu("MatMul", {random_tensor(t, {33, 40}, 46), b}, {}, tol);
    expect_like_cpu("MatMul", {random_tensor(t, {256, 384}, 47), random_tensor(t, {384, 512}, 48)}, {}, tol);
    const Tensor at = random_tensor(t, {40, 33}, 49), bt = random_tensor(t, {17, 40}, 50);
    expect_like_cpu("Gemm", {at, bt}, {{"transA", int64_t(1)}, {"transB", int64_t(1)}, {"alpha", 0.5f}}, tol);
    expect_like_cpu("Gemm", {at, bt, random_tensor(t, {33, 17}, 51)},
                    {{"transA", int64_t(1)}, {"transB", int64_t(1)}, {"beta", 0.5f}}, tol);
    expect_like_cpu("Gemm", {at, bt, random_tensor(t, {17}, 52)}, {{"transA", int64_t(1)}, {"transB", int64_t(1)}},
                    tol);
    expect_like_cpu("Gemm", {random_tensor(t, {1, 40}, 53), bt, random_tensor(t, {1, 17}, 54)},
                    {{"transB", int64_t(1)}}, tol);
  }
}

Tensor scalar(DType t, double v) {
  Tensor s = random_tensor(t, {}, 0);
  if (t == DType::kFloat32) s.data<float>()[0] = float(v);
  if (t == DType::kBFloat16) s.data<BFloat16>()[0] = BFloat16(float(v));
  if (t == DType::kFloat16) s.data<Half>()[0] = Half(float(v));
  if (t == DType::kInt64) s.data<int64_t>()[0] = int64_t(v);
  if (t == DType::kBool) s.data<bool>()[0] = v != 0;
  return s;
}

Tensor int64s(std::vector<int64_t> dims, std::vector<int64_t> values) {
  Tensor t(DType::kInt64, std::move(dims));
  for (size_t i = 0; i < values.size(); ++i) t.data<int64_t>()[i] = values[i];
  return t;
}

// The ops of a transformer's training graph (the toy GPT's) beside the elementwise ones, in three dtypes.
TEST(Cuda, TrainingGraphOpsComputeAsOnTheCpu) {
  SKIP_WITHOUT_GPU();
  for (DType t : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    const double tol = t == DType::kFloat32 ? 1e-5 : 1e-2;
    Tensor x = random_tensor(t, {4, 6, 32}, 11), dy = random_tensor(t, {4, 6, 32}, 12);
    expect_like_cpu("com.onnxtrain.GeluGrad", {dy, x}, {}, tol);
    expect_like_cpu("com.onnxtrain.GeluGrad", {dy, x}, {{"approximate", std::string("tanh")}}, tol);
    // GeluAndGrad in one pass (whole packs, and an odd count's tail): the CPU's, and the GPU's Gelu and GeluGrad
    // apart bit for bit (a recompute changes no bit).
    for (const std::string form : {"none", "tanh"}) {
      Tensor xo = random_tensor(t, {3, 7, 5}, 15), dyo = random_tensor(t, {3, 7, 5}, 16);
      for (const auto& [d, v] : {std::pair{dy, x}, std::pair{dyo, xo}}) {
        expect_like_cpu("com.onnxtrain.GeluAndGrad", {d, v}, {{"approximate", form}}, tol, 2);
        auto both = run_one(kGpu, "com.onnxtrain.GeluAndGrad", {d, v}, {{"approximate", form}}, 2);
        auto dx = run_one(kGpu, "com.onnxtrain.GeluGrad", {d, v}, {{"approximate", form}});
        auto y = run_one(kGpu, "Gelu", {v}, {{"approximate", form}});
        EXPECT_EQ(both.at("o0").to_double(), dx.at("o0").to_double()) << form;
        EXPECT_EQ(both.at("o1").to_double(), y.at("o0").to_double()) << form;
      }
    }
    Tensor w = random_tensor(t, {32}, 13), b = random_tensor(t, {32}, 14);
    expect_like_cpu("LayerNormalization", {x, w, b}, {{"axis", int64_t(-1)}, {"epsilon", 1e-5f}}, tol, 3);
    auto stats = run_one(kCpu, "LayerNormalization", {x, w, b}, {{"axis", int64_t(2)}}, 3);
    expect_like_cpu("com.onnxtrain.LayerNormalizationGrad", {dy, x, w, stats.at("o1"), stats.at("o2")},
                    {{"axis", int64_t(2)}, {"epsilon", 1e-5f}}, tol, 3);
    Tensor xs = random_tensor(t, {3, 700, 32}, 21);  // dscale and dbias summed over 9 chunks of rows
    stats = run_one(kCpu, "LayerNormalization", {xs, w, b}, {{"axis", int64_t(2)}}, 3);
    expect_like_cpu("com.onnxtrain.LayerNormalizationGrad",
                    {random_tensor(t, {3, 700, 32}, 22), xs, w, stats.at("o1"), stats.at("o2")},
                    {{"axis", int64_t(2)}, {"epsilon", 1e-5f}}, tol, 3);
    const ir::Attributes kept{{"keepdims", int64_t(0)}};  // over leading dims: by columns over chunks of rows
    expect_like_cpu("ReduceSum", {xs, int64s({2}, {0, 1})}, kept, tol);
    expect_like_cpu("ReduceMean", {xs, int64s({1}, {0})}, kept, tol);
    expect_like_cpu("ReduceSum", {x, int64s({2}, {0, 2})}, kept, tol);  // (not leading: a block per output)
    Tensor lw = random_tensor(t, {24, 32}, 15), lb = random_tensor(t, {24}, 16);
    expect_like_cpu("com.onnxtrain.Linear", {x, lw, lb}, {}, tol);
    if (t != DType::kFloat32)  // (a float32 output of 16-bit operands: cast_into_product's `to`)
      expect_like_cpu("com.onnxtrain.Linear", {x, lw, lb}, {{"to", int64_t(1)}}, tol);
    Tensor table = random_tensor(t, {10, 8}, 17);
    expect_like_cpu("Gather", {table, int64s({2, 3}, {0, 9, -1, 3, 3, -10})}, {});
    expect_like_cpu("Gather", {table, int64s({4}, {7, 0, 1, 7})}, {{"axis", int64_t(1)}});
    Tensor updates = random_tensor(t, {5, 8}, 18);
    expect_like_cpu("ScatterND", {random_tensor(t, {10, 8}, 19), int64s({5, 1}, {2, 4, 2, -1, 2}), updates},
                    {{"reduction", std::string("add")}}, tol);
    expect_like_cpu("Split", {x, int64s({3}, {1, 2, 3})}, {{"axis", int64_t(1)}}, 1e-6, 3);
    expect_like_cpu("Trilu", {x, scalar(DType::kInt64, 1)}, {{"upper", int64_t(0)}});
    expect_like_cpu("Trilu", {x, scalar(DType::kInt64, -2)}, {});
  }
  Tensor flags(DType::kBool, {7});
  for (int i = 0; i < 7; ++i) flags.data<bool>()[i] = i % 3 == 0;
  expect_like_cpu("Not", {flags}, {});
  expect_like_cpu("Range", {scalar(DType::kInt64, 3), scalar(DType::kInt64, 20), scalar(DType::kInt64, 4)}, {});
  expect_like_cpu("Range", {scalar(DType::kFloat32, -1), scalar(DType::kFloat32, 2), scalar(DType::kFloat32, 0.25)});
}

// The norms of a float32 X writing Y in 16 bits (norm_output_cast: attribute `to`), their gradients reading dY in 16
// bits, as on the CPU (where the float32 copies compute them).
TEST(Cuda, NormsWriteAndReadSixteenBitsBesideFloat32) {
  SKIP_WITHOUT_GPU();
  Tensor x = random_tensor(DType::kFloat32, {3, 700, 40}, 41), w = random_tensor(DType::kFloat32, {40}, 42),
         b = random_tensor(DType::kFloat32, {40}, 43);
  for (DType t : {DType::kBFloat16, DType::kFloat16}) {
    const ir::Attributes norm{{"axis", int64_t(-1)}, {"epsilon", 1e-5f}, {"to", int64_t(t)}};
    Tensor dy = random_tensor(t, {3, 700, 40}, 44);
    expect_like_cpu("com.onnxtrain.LayerNormalization", {x, w, b}, norm, 1e-2, 3);
    auto stats = run_one(kCpu, "com.onnxtrain.LayerNormalization", {x, w, b}, norm, 3);
    expect_like_cpu("com.onnxtrain.LayerNormalizationGrad", {dy, x, w, stats.at("o1"), stats.at("o2")}, norm, 1e-5, 3);
    expect_like_cpu("com.onnxtrain.RMSNormalization", {x, w}, norm, 1e-2, 2);
    stats = run_one(kCpu, "com.onnxtrain.RMSNormalization", {x, w}, norm, 2);
    expect_like_cpu("com.onnxtrain.RMSNormalizationGrad", {dy, x, w, stats.at("o1")}, norm, 1e-5, 2);
  }
}

// Llama's fused ops: RMSNorm and its gradient (dscale over one chunk of rows and over several), SwiGLU and its
// gradient, rotary embeddings (cos and sin broadcast from (T, D) and (B, 1, T, D), and the transposed map of the
// gradient), in three dtypes, and the rotary embedding of a 16-bit X with float32 cos and sin (autocast's).
TEST(Cuda, TheLlamaFusionsComputeAsOnTheCpu) {
  SKIP_WITHOUT_GPU();
  for (DType t : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    const double tol = t == DType::kFloat32 ? 1e-5 : 1e-2;
    Tensor x = random_tensor(t, {4, 6, 40}, 31), dy = random_tensor(t, {4, 6, 40}, 32), w = random_tensor(t, {40}, 33);
    const ir::Attributes norm{{"axis", int64_t(-1)}, {"epsilon", 1e-6f}};
    expect_like_cpu("com.onnxtrain.RMSNormalization", {x, w}, norm, tol, 2);
    auto stats = run_one(kCpu, "com.onnxtrain.RMSNormalization", {x, w}, norm, 2);
    expect_like_cpu("com.onnxtrain.RMSNormalizationGrad", {dy, x, w, stats.at("o1")}, norm, tol, 2);
    Tensor xs = random_tensor(t, {3, 700, 40}, 38);  // dscale summed over 9 chunks of rows
    stats = run_one(kCpu, "com.onnxtrain.RMSNormalization", {xs, w}, norm, 2);
    expect_like_cpu("com.onnxtrain.RMSNormalizationGrad", {random_tensor(t, {3, 700, 40}, 39), xs, w, stats.at("o1")},
                    norm, tol, 2);
    Tensor u = random_tensor(t, {4, 6, 40}, 34);
    expect_like_cpu("com.onnxtrain.SwiGLU", {x, u}, {}, tol);
    expect_like_cpu("com.onnxtrain.SwiGLUGrad", {dy, x, u}, {}, tol, 2);
    Tensor q = random_tensor(t, {2, 3, 6, 16}, 35);
    for (std::vector<int64_t> dims : {std::vector<int64_t>{6, 16}, std::vector<int64_t>{2, 1, 6, 16}})
      for (int64_t transposed : {0, 1})
        expect_like_cpu("com.onnxtrain.RotaryEmbedding", {q, random_tensor(t, dims, 36), random_tensor(t, dims, 37)},
                        {{"transposed", transposed}}, tol);
    // autocast's, the casts folded in: X of t with float32 cos and sin, Y of t or float32
    Tensor c32 = random_tensor(DType::kFloat32, {6, 16}, 40), s32 = random_tensor(DType::kFloat32, {6, 16}, 41);
    for (DType y : {t, DType::kFloat32})
      expect_like_cpu("com.onnxtrain.RotaryEmbedding", {q, c32, s32}, {{"to", int64_t(y)}}, tol);
  }
}

// The rest of a transformers Llama's training graph (its masks, positions and label shift): Max and Min (variadic,
// broadcast), CumSum (bool counted, exclusive, reverse), GatherND (batch dims) and Pad (every mode).
TEST(Cuda, TheLlamaGraphsOtherOpsComputeAsOnTheCpu) {
  SKIP_WITHOUT_GPU();
  for (DType t : {DType::kFloat32, DType::kBFloat16}) {
    const double tol = t == DType::kFloat32 ? 1e-5 : 1e-2;
    Tensor a = random_tensor(t, {3, 1, 5}, 51), b = random_tensor(t, {4, 5}, 52), c = random_tensor(t, {5}, 53);
    expect_like_cpu("Max", {a, b, c}, {});
    expect_like_cpu("Min", {a, b}, {});
    for (int64_t exclusive : {0, 1})
      for (int64_t reverse : {0, 1})
        expect_like_cpu("CumSum", {random_tensor(t, {3, 7, 4}, 54), scalar(DType::kInt64, 1)},
                        {{"exclusive", exclusive}, {"reverse", reverse}}, tol);
    Tensor x = random_tensor(t, {2, 3, 4, 5}, 55);
    expect_like_cpu("GatherND", {x, int64s({2, 2}, {1, 2, 0, -1})}, {});
    expect_like_cpu("GatherND", {x, int64s({2, 2, 1}, {2, 0, 1, 1})}, {{"batch_dims", int64_t(1)}});
    for (const char* mode : {"constant", "reflect", "edge", "wrap"})
      expect_like_cpu("Pad", {x, int64s({8}, {0, 1, 2, 0, 0, 0, 1, 3}), scalar(t, 2.5)},
                      {{"mode", std::string(mode)}});
  }
  expect_like_cpu("Max", {int64s({4}, {1, -5, 7, 0}), int64s({1}, {2})}, {});
  expect_like_cpu("CumSum", {int64s({2, 3}, {1, 2, 3, 4, 5, 6}), scalar(DType::kInt64, -1)}, {});
  Tensor flags(DType::kBool, {2, 5});
  for (int i = 0; i < 10; ++i) flags.data<bool>()[i] = i % 3 != 1;
  expect_like_cpu("CumSum", {flags, scalar(DType::kInt64, 1)}, {});
  expect_like_cpu("Pad", {int64s({5}, {-100, 3, 4, 5, 6}), int64s({2}, {0, 1}), scalar(DType::kInt64, -100)}, {});
}

// GatherElements (BERT's graph: its token types) and ScatterElements (its gradient: added, or written), along
// each axis, with negative indices, int64 and int32 ones, indices smaller than the data off the axis.
TEST(Cuda, ElementIndexingComputesAsOnTheCpu) {
  SKIP_WITHOUT_GPU();
  for (DType t : {DType::kFloat32, DType::kBFloat16}) {
    const double tol = t == DType::kFloat32 ? 1e-5 : 1e-2;
    Tensor x = random_tensor(t, {3, 4, 5}, 61);
    Tensor idx = int64s({2, 3, 5}, {0, 1, 2, -1, -2, 3, 3, 0, 1, 2, 1, 1, 1, 1, 1, 0, 2, 0, 2, 0, -4, 3, 2, 1, 0,
                                    0, 0, 0, 0, 0});
    expect_like_cpu("GatherElements", {x, idx}, {{"axis", int64_t(1)}});
    Tensor narrow(DType::kInt32, {3, 2, 2});
    for (int i = 0; i < 12; ++i) narrow.data<int32_t>()[i] = int32_t(i % 5) - 2;
    expect_like_cpu("GatherElements", {x, narrow}, {{"axis", int64_t(-1)}});
    expect_like_cpu("GatherElements", {x, int64s({1, 4, 5}, std::vector<int64_t>(20, 2))}, {{"axis", int64_t(0)}});
    Tensor upd = random_tensor(t, {2, 3, 5}, 62);
    for (const char* reduction : {"add", "none"}) {
      Tensor unique = int64s({2, 3, 5}, {0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2,
                                         3, 3, 3, 3, 3, -4, 1, 2, 0, -3, 1, 2, 0, 1, 2});
      // (repeated positions only where the updates add: written ones would race)
      expect_like_cpu("ScatterElements", {x, std::string(reduction) == "add" ? idx : unique, upd},
                      {{"axis", int64_t(1)}, {"reduction", std::string(reduction)}}, tol);
    }
  }
}

// The random ops draw the CPU's numbers for the same seed (counter-based: element i from the hash of the seed and i).
TEST(Cuda, RandomOpsDrawTheCpusNumbers) {
  SKIP_WITHOUT_GPU();
  for (DType t : {DType::kFloat32, DType::kBFloat16}) {
    const double tol = t == DType::kFloat32 ? 1e-5 : 1e-2;
    Tensor like = random_tensor(t, {3, 50, 7}, 41), p(DType::kFloat32, {3, 50, 7});
    for (int64_t i = 0; i < p.numel(); ++i) p.data<float>()[i] = float(i % 11) / 10.f;
    expect_like_cpu("RandomUniformLike", {like}, {{"low", -2.f}, {"high", 3.f}, {"seed", 7.f}}, tol);
    expect_like_cpu("RandomNormalLike", {like}, {{"mean", 1.f}, {"scale", 0.5f}, {"seed", 8.f}}, tol);
    expect_like_cpu("Bernoulli", {p}, {{"seed", 9.f}, {"dtype", int64_t(t == DType::kFloat32 ? 1 : 16)}});
  }
}

// The fused head and loss: forward (the loss, log-sum-exps, the gradients it forms and the scores), the gradient of
// a loss per row, and LinearGradAdd for each of X, W and B.
TEST(Cuda, TheFusedHeadComputesAsOnTheCpu) {
  SKIP_WITHOUT_GPU();
  Tensor target = int64s({12}, {3, 0, 40, -100, 7, 7, 39, 1, -100, 22, 5, 13});
  for (DType t : {DType::kFloat32, DType::kBFloat16}) {
    const double tol = t == DType::kFloat32 ? 1e-5 : 2e-2;
    Tensor x = random_tensor(t, {3, 4, 16}, 31), w = random_tensor(t, {41, 16}, 32), b = random_tensor(t, {41}, 33);
    const ir::Attributes mean = {{"ignore_index", int64_t(-100)}};
    expect_like_cpu("com.onnxtrain.LinearCrossEntropy", {x, w, b, target}, mean, tol, 6);
    ir::Attributes none = mean;
    none["reduction"] = std::string("none");
    expect_like_cpu("com.onnxtrain.LinearCrossEntropy", {x, w, b, target}, none, tol, 2);
    auto fwd = run_one(kCpu, "com.onnxtrain.LinearCrossEntropy", {x, w, b, target}, none, 2);
    Tensor dloss = random_tensor(DType::kFloat32, {12}, 34);
    expect_like_cpu("com.onnxtrain.LinearCrossEntropyGrad", {dloss, x, w, b, target, fwd.at("o1")}, none, tol, 3);
    Tensor dscores = random_tensor(t, {3, 4, 41}, 35);
    expect_like_cpu("com.onnxtrain.LinearGradAdd", {dscores, x, w, random_tensor(t, {3, 4, 16}, 36)}, {}, tol);
    expect_like_cpu("com.onnxtrain.LinearGradAdd", {dscores, x, w, random_tensor(t, {41, 16}, 37)},
                    {{"wrt", int64_t(1)}}, tol);
    expect_like_cpu("com.onnxtrain.LinearGradAdd", {dscores, x, w, b}, {{"wrt", int64_t(2)}}, tol);
  }
  // The unfused loss and its gradient, over float32 scores and (through float32 copies) 16-bit ones.
  for (DType t : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    const double tol = t == DType::kFloat32 ? 1e-5 : 1e-2;
    Tensor scores = random_tensor(t, {12, 41}, 38);
    expect_like_cpu("SoftmaxCrossEntropyLoss", {scores, target}, {{"ignore_index", int64_t(-100)}}, tol, 3);
    expect_like_cpu("SoftmaxCrossEntropyLoss", {scores, target},
                    {{"ignore_index", int64_t(-100)}, {"reduction", std::string("none")}}, tol, 3);
    Tensor kept = int64s({12}, {3, 0, 40, 0, 7, 7, 39, 1, 0, 22, 5, 13});  // (the gradient's targets: none ignored)
    auto lse = run_one(kCpu, "SoftmaxCrossEntropyLoss", {scores, kept}, {}, 3).at("o2");
    expect_like_cpu("com.onnxtrain.SoftmaxCrossEntropyLossGrad", {random_tensor(t, {12}, 39), scores, lse, kept},
                    {}, tol);
  }
}

// The fused head at a real vocabulary (GPT-2's 50257 classes) goes by blocks of rows (667 in float32, so three here):
// the loss, log-sum-exps and the gradients forward forms, and the gradient of a loss per row, as the CPU's; without
// dB, with its classes padded to a multiple of 8 (and forward's logits, output 5, copied without the padding), with
// a bias and without one (GPT-2's head, whose scores' product then has no base: cuBLASLt's).
TEST(Cuda, TheFusedHeadGoesByBlocksOfRowsAsTheCpu) {
  SKIP_WITHOUT_GPU();
  const int64_t n = 1400, classes = 50257;
  Tensor target(DType::kInt64, {n});
  for (int64_t i = 0; i < n; ++i) target.data<int64_t>()[i] = i % 97 == 5 ? -100 : (i * 7919) % classes;
  for (DType t : {DType::kFloat32, DType::kBFloat16}) {
    const double tol = t == DType::kFloat32 ? 1e-5 : 2e-2;
    Tensor x = random_tensor(t, {n, 16}, 61), w = random_tensor(t, {classes, 16}, 62);
    for (const Tensor& b : {random_tensor(t, {classes}, 63), Tensor()}) {
      const bool db = b.defined();  // (dB asked for: no padding)
      const ir::Attributes mean = {{"ignore_index", int64_t(-100)}};
      expect_like_cpu("com.onnxtrain.LinearCrossEntropy", {x, w, b, target}, mean, tol, 5,
                      {true, true, true, true, db});
      ir::Attributes none = mean;
      none["reduction"] = std::string("none");
      auto fwd = run_one(kCpu, "com.onnxtrain.LinearCrossEntropy", {x, w, b, target}, none, 2);
      expect_like_cpu("com.onnxtrain.LinearCrossEntropyGrad",
                      {random_tensor(DType::kFloat32, {n}, 64), x, w, b, target, fwd.at("o1")}, none, tol, 3,
                      {true, true, db});
      expect_like_cpu("com.onnxtrain.LinearCrossEntropy", {x, w, b, target}, mean, tol, 6,
                      {true, true, true, true, false, true});
      expect_like_cpu("com.onnxtrain.LinearCrossEntropyGrad",
                      {random_tensor(DType::kFloat32, {n}, 65), x, w, b, target, fwd.at("o1")}, none, tol, 2);
    }
  }
}

// FlashAttention and its gradient: a causal mask, an additive bias, grouped-query heads and dropout (the CPU's mask),
// the operands as (B, H, T, d) and sequence-major (B, T, H, d).
TEST(Cuda, FlashAttentionComputesAsOnTheCpu) {
  SKIP_WITHOUT_GPU();
  const int64_t tq = 37, tk = 37, d = 40, dv = 24;
  Tensor causal(DType::kBool, {tq, tk});
  for (int64_t i = 0; i < tq; ++i)
    for (int64_t j = 0; j < tk; ++j) causal.data<bool>()[i * tk + j] = j > i;
  for (DType t : {DType::kFloat32, DType::kBFloat16}) {
    const double tol = t == DType::kFloat32 ? 1e-5 : 2e-2;
    for (int64_t groups : {1, 3}) {
      const bool major = groups == 3;  // (B, T, H, d), else (B, H, T, d)
      auto dims = [&](int64_t heads, int64_t n, int64_t e) {
        return major ? std::vector<int64_t>{2, n, heads, e} : std::vector<int64_t>{2, heads, n, e};
      };
      Tensor q = random_tensor(t, dims(3, tq, d), 21), k = random_tensor(t, dims(3 / groups, tk, d), 22);
      Tensor v = random_tensor(t, dims(3 / groups, tk, dv), 23), bias = random_tensor(t, {1, 1, tq, tk}, 24);
      std::vector<Tensor> in = {q, k, v, scalar(t, 0.2), causal, scalar(t, -INFINITY), scalar(DType::kFloat32, 0.25),
                                scalar(DType::kBool, groups == 3), bias};
      ir::Attributes attrs = {{"kv_groups", groups}, {"sequence_major", std::vector<int64_t>(4, major)}};
      expect_like_cpu("com.onnxtrain.FlashAttention", in, attrs, tol, 2);
      auto fwd = run_one(kCpu, "com.onnxtrain.FlashAttention", in, attrs, 2);
      std::vector<Tensor> grad_in = {random_tensor(t, dims(3, tq, dv), 25), q, k, v, fwd.at("o0"), fwd.at("o1")};
      grad_in.insert(grad_in.end(), in.begin() + 3, in.end());
      expect_like_cpu("com.onnxtrain.FlashAttentionGrad", grad_in, attrs, tol, 3);
    }
    // The unfused form: the scores' product and the masked softmax, and its gradient.
    Tensor q = random_tensor(t, {2, 3, tq, d}, 26), kt = random_tensor(t, {1, 3, d, tk}, 27);
    std::vector<Tensor> in = {q, kt, scalar(t, 0.3), causal, scalar(t, -INFINITY)};
    expect_like_cpu("com.onnxtrain.AttentionSoftmax", in, {}, tol);
    Tensor y = run_one(kCpu, "com.onnxtrain.AttentionSoftmax", in, {}).at("o0");
    expect_like_cpu("com.onnxtrain.MaskedSoftmax", {random_tensor(t, {2, 3, tq, tk}, 28), in[2], causal, in[4]}, {},
                    tol);
    expect_like_cpu("com.onnxtrain.MaskedSoftmaxGrad", {random_tensor(t, {2, 3, tq, tk}, 29), y, in[2], causal}, {},
                    tol);
  }
}

// The tiled kernels over several tiles of rows and keys with grouped-query heads: the tensor-core ones of 16-bit
// operands (attention_mma.cuh) at both head sizes, the float32 ones (attention_f32.cuh) at heads of 64 (of 128, the
// warp-per-row kernels). (ONNXTRAIN_CUDA_ATTENTION=simple runs the warp-per-row kernels for all of them.)
TEST(Cuda, TiledAttentionComputesAsOnTheCpu) {
  SKIP_WITHOUT_GPU();
  const int64_t n = 150;
  Tensor causal(DType::kBool, {n, n});
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) causal.data<bool>()[i * n + j] = j > i;
  for (DType t : {DType::kFloat16, DType::kBFloat16, DType::kFloat32})
    for (int64_t d : {64, 128}) {
      const double tol = t == DType::kFloat32 ? 1e-5 : 2e-2;
      Tensor q = random_tensor(t, {2, 4, n, d}, 31), k = random_tensor(t, {2, 2, n, d}, 32);
      Tensor v = random_tensor(t, {2, 2, n, d}, 33);
      std::vector<Tensor> in = {q, k, v, scalar(t, 0.125), causal, scalar(t, -INFINITY),
                                scalar(DType::kFloat32, 0.f), scalar(DType::kBool, false)};
      const ir::Attributes attrs = {{"kv_groups", int64_t(2)}};
      expect_like_cpu("com.onnxtrain.FlashAttention", in, attrs, tol, 2);
      auto fwd = run_one(kCpu, "com.onnxtrain.FlashAttention", in, attrs, 2);
      std::vector<Tensor> grad_in = {random_tensor(t, {2, 4, n, d}, 34), q, k, v, fwd.at("o0"), fwd.at("o1")};
      grad_in.insert(grad_in.end(), in.begin() + 3, in.end());
      expect_like_cpu("com.onnxtrain.FlashAttentionGrad", grad_in, attrs, tol, 3);
    }
}

// Attention of operands of dtype t under GPT-2's causal bias of 0 and -inf of a batch's own and under a random bias,
// with dropout over whole blocks of keys (128); GPT-2's operands sequence-major (B, T, H, d) as its projections write
// them (the attention_layout pass's), and packed side by side in one X, the random bias's as (B, H, T, d).
void attention_under_biases_as_on_the_cpu(DType t) {
  const int64_t n = 128, d = 64;
  for (int form : {0, 1, 2}) {  // GPT-2's sequence-major operands, then packed side by side in X; the random bias's
    const bool random = form == 2, packed = form == 1;
    const std::vector<int64_t> dims = random ? std::vector<int64_t>{2, 4, n, d} : std::vector<int64_t>{2, n, 4, d};
    ir::Attributes attrs = {{"sequence_major", std::vector<int64_t>(4, !random)}};
    if (packed) attrs["packed_heads"] = int64_t(4);
    const double tol = t == DType::kFloat32 ? 1e-5 : 2e-2;
    Tensor bias32 = random_tensor(DType::kFloat32, {2, 1, n, n}, 36);
    if (!random)
      for (int64_t b = 0; b < 2; ++b)
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < n; ++j) bias32.data<float>()[(b * n + i) * n + j] = j > i ? -INFINITY : 0.f;
    const Tensor bias = bf16_tensors::as(t, bias32);
    Tensor q = random_tensor(t, packed ? std::vector<int64_t>{2, n, 12 * d} : dims, 37);
    Tensor k = packed ? Tensor() : random_tensor(t, dims, 38), v = packed ? Tensor() : random_tensor(t, dims, 39);
    std::vector<Tensor> in = {q, k, v, scalar(t, 0.125), Tensor(), Tensor(), scalar(DType::kFloat32, 0.1),
                              scalar(DType::kBool, true), bias};
    expect_like_cpu("com.onnxtrain.FlashAttention", in, attrs, tol, 2);
    auto fwd = run_one(kCpu, "com.onnxtrain.FlashAttention", in, attrs, 2);
    std::vector<Tensor> grad_in = {random_tensor(t, {2, n, 4, d}, 40), q, k, v, fwd.at("o0"), fwd.at("o1")};
    if (random) grad_in[0] = random_tensor(t, dims, 40);
    grad_in.insert(grad_in.end(), in.begin() + 3, in.end());
    expect_like_cpu("com.onnxtrain.FlashAttentionGrad", grad_in, attrs, tol, packed ? 1 : 3);
  }
}

// The tensor-core kernels' two builds (attention_builds.cuh), each launch running both: under GPT-2's bias no tile of
// the map is mixed (the lean build applies), under a random bias the general one does.
TEST(Cuda, TensorCoreAttentionsLeanAndGeneralBuildsComputeAsOnTheCpu) {
  SKIP_WITHOUT_GPU();
  attention_under_biases_as_on_the_cpu(DType::kBFloat16);
}

// The float32 kernels (attention_f32.cuh) the same way: the map's votes read a float32 bias 4 elements at a time.
TEST(Cuda, Float32AttentionUnderBiasesComputesAsOnTheCpu) {
  SKIP_WITHOUT_GPU();
  attention_under_biases_as_on_the_cpu(DType::kFloat32);
}

TEST(Cuda, DropoutDrawsTheCpusMask) {
  SKIP_WITHOUT_GPU();
  Tensor ratio(DType::kFloat32, {}), training(DType::kBool, {});
  ratio.data<float>()[0] = 0.3f;
  training.data<bool>()[0] = true;
  for (DType t : {DType::kFloat32, DType::kBFloat16}) {
    std::vector<Tensor> in = {random_tensor(t, {3, 1000}, 9), ratio, training};
    auto want = run_one(kCpu, "Dropout", in, {{"seed", int64_t(42)}}, 2);
    auto got = run_one(kGpu, "Dropout", in, {{"seed", int64_t(42)}}, 2);
    for (const char* name : {"o0", "o1"}) {
      const Tensor &w = want.at(name), &g = got.at(name);
      ASSERT_EQ(w.nbytes(), g.nbytes());
      EXPECT_EQ(std::memcmp(w.raw(), g.raw(), w.nbytes()), 0) << name << " in " << dtype_name(t);
    }
  }
  // Attribute to (dropout_fusion.cpp): a bf16 Dropout widened to float32 (then with a residual added), and its
  // gradient of a float32 dy narrowed to bf16.
  struct Case {
    const char* op;
    DType x, to;
    bool residual;
  };
  for (const Case& k : {Case{"com.onnxtrain.Dropout", DType::kBFloat16, DType::kFloat32, false},
                        Case{"com.onnxtrain.Dropout", DType::kBFloat16, DType::kFloat32, true},
                        Case{"com.onnxtrain.DropoutGrad", DType::kFloat32, DType::kBFloat16, false}}) {
    std::vector<Tensor> in = {random_tensor(k.x, {3, 1000}, 10), ratio, training};
    if (k.residual) in.push_back(random_tensor(DType::kFloat32, {3, 1000}, 11));
    const ir::Attributes attrs = {{"seed", int64_t(42)}, {"to", int64_t(k.to)}};
    auto want = run_one(kCpu, k.op, in, attrs, 1), got = run_one(kGpu, k.op, in, attrs, 1);
    const Tensor &w = want.at("o0"), &g = got.at("o0");
    ASSERT_EQ(w.nbytes(), g.nbytes()) << k.op;
    EXPECT_EQ(std::memcmp(w.raw(), g.raw(), w.nbytes()), 0) << k.op << (k.residual ? " with a residual" : "");
  }
}

// SGD steps of the MLP on `device` (the update on the host), each step's loss.
std::vector<float> train(Device device) {
  SessionOptions options;
  options.device = device;
  Session s = training_session(test_graphs::mlp_with_loss(), TrainingSpec{{"w1", "b1", "w2"}, "loss"}, options);
  std::map<std::string, Tensor> params = {{"w1", test_graphs::pattern_tensor({8, 16})},
                                          {"b1", test_graphs::pattern_tensor({16})},
                                          {"w2", test_graphs::pattern_tensor({16, 4})}};
  Tensor x = test_graphs::pattern_tensor({32, 8}), t = test_graphs::pattern_tensor({32, 4});
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = t.data<float>()[i] * 0.5f + 0.1f;
  auto on = [&](const Tensor& h) { return device == kCpu ? h : to_gpu(h); };
  std::vector<float> losses;
  for (int step = 0; step < 30; ++step) {
    std::map<std::string, Tensor> feeds = {{"x", on(x)}, {"t", on(t)}};
    for (auto& [name, p] : params) feeds[name] = on(p);
    auto [outs, state] = s.run_forward(feeds);
    losses.push_back(to_host(outs.at("loss")).data<float>()[0]);
    auto grads = s.run_backward(*state);
    for (auto& [name, p] : params) {
      EXPECT_TRUE(grads.at(name).device() == device);
      Tensor g = to_host(grads.at(name));
      for (int64_t i = 0; i < p.numel(); ++i) p.data<float>()[i] -= 0.2f * g.data<float>()[i];
    }
  }
  return losses;
}

TEST(Cuda, AnMlpTrainsAsOnTheCpu) {
  SKIP_WITHOUT_GPU();
  std::vector<float> gpu = train(kGpu), cpu = train(kCpu);
  ASSERT_EQ(gpu.size(), cpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) EXPECT_NEAR(gpu[i], cpu[i], 1e-5 * std::abs(cpu[i])) << "step " << i;
  EXPECT_LT(gpu.back(), 0.5f * gpu.front());
  EXPECT_EQ(CachingAllocator::of(kGpu).stats().allocated, 0) << "every device buffer returned";
}

// TrainingSession (the C++ API's and the CLI's training) on the GPU: host batches copied there, AdamW and SGD on
// the GPU's update kernels, gradients accumulated over two micro-batches, as on the CPU.
TEST(Cuda, ATrainingSessionTrainsOnTheGpuAsOnTheCpu) {
  SKIP_WITHOUT_GPU();
  SessionOptions on_gpu;
  on_gpu.device = kGpu;
  for (const OptimizerOptions& opt : {OptimizerOptions{"adamw", 1e-2, 0.01}, OptimizerOptions{"sgd", 0.1, 0, 0.9}}) {
    TrainingSession gpu = TrainingSession::from_bytes(test_graphs::mlp_model_bytes(), "loss", opt, on_gpu);
    TrainingSession cpu = TrainingSession::from_bytes(test_graphs::mlp_model_bytes(), "loss", opt);
    for (int step = 0; step < 5; ++step) {
      for (int micro = 0; micro < 2; ++micro) {
        Tensor x = test_graphs::pattern_tensor({4, 8}), t = test_graphs::pattern_tensor({4, 4});
        for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = t.data<float>()[i] * 0.5f + 0.1f * float(micro);
        const double want = cpu.train_step({{"x", x}, {"t", t}}), got = gpu.train_step({{"x", x}, {"t", t}});
        EXPECT_NEAR(got, want, 1e-5 * std::abs(want)) << opt.kind << " step " << step;
      }
      gpu.optimizer_step(), cpu.optimizer_step();
      gpu.lazy_reset_grad(), cpu.lazy_reset_grad();
    }
    for (const std::string& name : gpu.parameter_names()) {
      ASSERT_TRUE(gpu.tensor(name).device() == kGpu) << name;
      auto got = gpu.tensor(name).to_double(), want = cpu.tensor(name).to_double();
      for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << opt.kind << " " << name;
    }
  }
}

}  // namespace
}  // namespace onnxtrain
