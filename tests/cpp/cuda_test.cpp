// The CUDA backend against the CPU kernels: without a GPU (or without CUDA in the build) a CUDA device is refused
// with a clear error and the GPU tests skip; with one, single nodes and an MLP's training run on it as on the CPU,
// and Dropout draws the CPU's mask bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>

#include "core/allocator.h"
#include "onnxtrain/session.h"
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

// One node of `op` over inputs named i0, i1, ..., run by an inference session on `device`.
std::map<std::string, Tensor> run_one(Device device, const std::string& op, const std::vector<Tensor>& inputs,
                                      ir::Attributes attrs, size_t outputs = 1) {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 20;
  std::vector<ir::Value*> in;
  std::map<std::string, Tensor> feeds;
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::string name = "i" + std::to_string(i);
    Shape shape;
    for (int64_t d : inputs[i].dims()) shape.push_back(Dim(d));
    in.push_back(test_graphs::add_input(*g, name, inputs[i].dtype(), shape));
    feeds[name] = device == kCpu ? inputs[i] : to_gpu(inputs[i]);
  }
  std::vector<ir::Value*> out;
  for (size_t i = 0; i < outputs; ++i) out.push_back(g->add_value("o" + std::to_string(i)));
  g->add_node(op, in, out, std::move(attrs))->opset = 20;
  for (ir::Value* v : out) g->outputs.push_back(v);
  SessionOptions options;
  options.device = device;
  Session s(std::move(g), options);
  auto r = s.run(feeds);
  for (auto& [name, t] : r) {
    EXPECT_TRUE(t.device() == device) << op << " output " << name << " on " << t.device().str();
    t = to_host(t);
  }
  return r;
}

// The node on the GPU against the node on the CPU: within `rtol` of the largest output (sums in another order).
void expect_like_cpu(const std::string& op, const std::vector<Tensor>& inputs, ir::Attributes attrs = {},
                     double rtol = 1e-5) {
  auto want = run_one(kCpu, op, inputs, attrs);
  auto got = run_one(kGpu, op, inputs, attrs);
  for (auto& [name, w] : want) {
    const Tensor& g = got.at(name);
    ASSERT_EQ(g.dims(), w.dims()) << op;
    ASSERT_EQ(g.dtype(), w.dtype()) << op;
    auto gv = g.to_double(), wv = w.to_double();
    double scale = 0;
    for (double v : wv) scale = std::max(scale, std::abs(v));
    for (size_t i = 0; i < wv.size(); ++i)
      ASSERT_NEAR(gv[i], wv[i], rtol * std::max(scale, 1.0)) << op << " " << dtype_name(w.dtype()) << " at " << i;
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
}

// SGD steps of the MLP on `device` (the update on the host), each step's loss.
std::vector<float> train(Device device) {
  SessionOptions options;
  options.device = device;
  Session s(test_graphs::mlp_with_loss(), autodiff::TrainingSpec{{"w1", "b1", "w2"}, "loss"}, options);
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

}  // namespace
}  // namespace onnxtrain
