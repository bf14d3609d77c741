// A second device, registered from this test binary alone: host memory under another device id with its own
// memory and caching allocator, and kernels of its own (each checks that every tensor it touches lives on the
// device, counts its call, and computes on the host's memory it is). An MLP trains on it end to end, step for step
// bit-identical to the same training on the CPU; no file of src/ops, ir, autodiff, passes or memory knows of it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <map>

#include "core/allocator.h"
#include "kernels/kernel.h"
#include "kernels/parameter_update.h"
#include "onnxtrain/session.h"
#include "onnxtrain/training_session.h"
#include "runtime/session_impl.h"
#include "test_graphs.h"

namespace onnxtrain {
namespace {

constexpr Device kTestDevice{DeviceType::kExtDev, 7};

class CountingMemory : public DeviceMemory {
 public:
  void* reserve(size_t bytes, size_t alignment) override {
    ++reserved;
    return std::aligned_alloc(alignment, bytes);
  }
  void release(void* block) override { std::free(block); }
  void copy_from_host(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    ++to_host;
    std::memcpy(dst, src, bytes);
  }
  // As for a discrete accelerator: the inputs an op reads on the host reach its kernels as host copies.
  bool host_readable() const override { return false; }
  void* queue() const override { return thread_queue; }
  void set_queue(void* queue) override { thread_queue = queue; }
  int reserved = 0, to_host = 0;
  static thread_local void* thread_queue;
};
thread_local void* CountingMemory::thread_queue = nullptr;

CountingMemory& test_memory() {
  static CountingMemory m;
  return m;
}

std::map<std::string, int>& calls() {
  static std::map<std::string, int> c;
  return c;
}

// The queues the device's kernels ran on: how many kernels on each.
std::map<void*, int>& queues() {
  static std::map<void*, int> q;
  return q;
}

// The device's kernel of an op: every tensor must be on the device, but for the inputs the op reads on the host
// (Expand's shape, ...), which must be host copies; the computation (and its scratch) is the host's kernel's.
kernels::KernelDef on_device(const std::string& domain, const std::string& name) {
  auto host = [domain, name] { return kernels::lookup_kernel(kCpu, domain, name); };
  auto run = [host](const ops::Op& op, kernels::KernelCtx& c) {
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      const Tensor* t = c.inputs[i];
      Device want = op.host_inputs() >> i & 1 ? kCpu : kTestDevice;
      if (t && !(t->device() == want)) c.fail("input " + std::to_string(i) + " is on " + t->device().str());
    }
    for (const Tensor* t : c.outputs)
      if (t && !(t->device() == kTestDevice)) c.fail("an output is on " + t->device().str());
    calls()[c.node.op_type]++;
    queues()[test_memory().queue()]++;
    host()->fn(op, c);
  };
  auto scratch = [host](const ops::Op& op, ops::InferCtx& shapes) {
    return host()->scratch ? host()->scratch(op, shapes) : Dim(0);
  };
  return {domain, name, run, scratch};
}

// The device's parameter updates: the host's, on tensors that must all be on the device.
void all_here(const std::string& where, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (t && !(t->device() == kTestDevice)) throw InputError(where + ": a tensor on " + t->device().str());
}
const kernels::ParameterUpdateKernels& host_updates() { return *kernels::parameter_updates_of(DeviceType::kCpu); }
void adamw_here(const std::string& where, Tensor& x, const Tensor& g, Tensor& m, Tensor& v, Tensor* max_v,
                int64_t step, const kernels::AdamWHyper& h) {
  all_here(where, {&x, &g, &m, &v, max_v});
  calls()["AdamW"]++;
  host_updates().adamw(where, x, g, m, v, max_v, step, h);
}
void sgd_here(const std::string& where, Tensor& x, const Tensor& g, Tensor* buf, bool first,
              const kernels::SgdHyper& h) {
  all_here(where, {&x, &g, buf});
  calls()["SGD"]++;
  host_updates().sgd(where, x, g, buf, first, h);
}
void accumulate_here(const std::string& where, Tensor& acc, const Tensor& g) {
  all_here(where, {&acc, &g});
  calls()["accumulate"]++;
  host_updates().accumulate(where, acc, g);
}

// The ops an MLP with a squared-error loss and its gradient graph need, and the parameter updates.
const bool kRegistered = [] {
  CachingAllocator::register_device(kTestDevice, test_memory());
  std::vector<kernels::KernelDef> defs;
  for (const char* op : {"MatMul",    "Add",     "Relu",    "Sub",       "Mul",   "ReduceMean", "Gemm",
                         "ReduceSum", "Where",   "Greater", "Reshape",   "Shape", "Expand",     "ConstantOfShape",
                         "Concat",    "Gather",  "Slice",   "Unsqueeze", "Cast",  "Size",       "Div",
                         "Identity",  "Squeeze", "Neg",     "Transpose", "Sum"})
    defs.push_back(on_device("", op));
  defs.push_back(on_device("com.onnxtrain", "Linear"));
  defs.push_back(on_device("com.onnxtrain", "FusedMatMul"));
  kernels::register_parameter_updates(DeviceType::kExtDev, {adamw_here, sgd_here, accumulate_here});
  return kernels::register_kernels(kTestDevice, defs);
}();

using test_graphs::mlp_with_loss;

Tensor on(Device device, const Tensor& host) { return host.clone(&CachingAllocator::of(device)); }

// SGD on `device`, returning each step's loss; `host_allocs`: allocations from the host's allocator during the steps.
std::vector<float> train(Device device, int64_t* host_allocs) {
  SessionOptions options;
  options.device = device;
  Session s = training_session(mlp_with_loss(), TrainingSpec{{"w1", "b1", "w2"}, "loss"}, options);
  std::map<std::string, Tensor> params = {{"w1", on(device, test_graphs::pattern_tensor({8, 16}))},
                                          {"b1", on(device, test_graphs::pattern_tensor({16}))},
                                          {"w2", on(device, test_graphs::pattern_tensor({16, 4}))}};
  Tensor x = on(device, test_graphs::pattern_tensor({32, 8}));
  Tensor t = test_graphs::pattern_tensor({32, 4});
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = t.data<float>()[i] * 0.5f + 0.1f;
  t = on(device, t);
  std::vector<float> losses;
  int64_t host_before = CachingAllocator::global().stats().num_allocs;
  for (int step = 0; step < 30; ++step) {
    std::map<std::string, Tensor> feeds = params;
    feeds["x"] = x;
    feeds["t"] = t;
    auto [outs, state] = s.run_forward(feeds);
    EXPECT_TRUE(outs.at("loss").device() == device);
    losses.push_back(outs.at("loss").data<float>()[0]);
    auto grads = s.run_backward(*state);
    for (auto& [name, p] : params) {  // the device's memory is the host's: the test updates it in place
      const Tensor& g = grads.at(name);
      EXPECT_TRUE(g.device() == device);
      for (int64_t i = 0; i < p.numel(); ++i) p.data<float>()[i] -= 0.2f * g.data<float>()[i];
    }
  }
  *host_allocs = CachingAllocator::global().stats().num_allocs - host_before;
  return losses;
}

TEST(SecondDevice, TrainsAnMlpEndToEndAsTheCpuDoes) {
  calls().clear();
  int64_t host_allocs = -1;
  std::vector<float> on_device = train(kTestDevice, &host_allocs);
  // Every buffer of the steps came from the device's allocator and memory.
  EXPECT_GT(CachingAllocator::of(kTestDevice).stats().num_allocs, 100);
  EXPECT_GT(test_memory().reserved, 0);
  // The shapes, axes and scalars read on the host are known there (constants, or their values as shape inference
  // found them, for the call's dims): a step reads nothing back from the device, and its host buffers are those
  // values alone (one a step here).
  EXPECT_EQ(test_memory().to_host, 0) << "copies from the device to the host";
  EXPECT_LE(host_allocs, 30) << "host buffers other than the shapes read on the host";
  EXPECT_GT(calls()["MatMul"], 0);
  EXPECT_GT(calls()["Relu"], 0);
  // A Shape read on the host alone (ReduceMean's gradient's Expand reads it) runs no kernel there; a Size read by a
  // kernel (Cast, for the mean's count) does.
  EXPECT_EQ(calls().count("Shape"), 0u);
  EXPECT_EQ(calls()["Size"], 30);
  EXPECT_EQ(CachingAllocator::of(kTestDevice).stats().allocated, 0) << "every buffer returned";
  std::vector<float> on_cpu = train(kCpu, &host_allocs);
  EXPECT_GT(host_allocs, 100);
  ASSERT_EQ(on_device.size(), on_cpu.size());
  for (size_t i = 0; i < on_cpu.size(); ++i) EXPECT_EQ(on_device[i], on_cpu[i]) << "step " << i;
  EXPECT_LT(on_device.back(), 0.5f * on_device.front());
}

// A shape that depends on data (here a model input on the device) is copied to the host: the one read back.
TEST(SecondDevice, AShapeFromDataIsCopiedToTheHost) {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 20;
  ir::Value* x = test_graphs::add_input(*g, "x", DType::kFloat32, {Dim(2), Dim(6)});
  ir::Value* shape = test_graphs::add_input(*g, "shape", DType::kInt64, {Dim(2)});
  ir::Value* y = g->add_value("y");
  g->add_node("Reshape", {x, shape}, {y})->opset = 20;
  g->outputs.push_back(y);
  SessionOptions options;
  options.device = kTestDevice;
  Session s = inference_session(std::move(g), options);
  Tensor dims(DType::kInt64, {2});
  dims.data<int64_t>()[0] = 3, dims.data<int64_t>()[1] = 4;
  const int before = test_memory().to_host;
  auto out = s.run({{"x", on(kTestDevice, test_graphs::pattern_tensor({2, 6}))}, {"shape", on(kTestDevice, dims)}});
  EXPECT_EQ(out.at("y").dims(), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(test_memory().to_host - before, 1);
}

// A caller's queue (PyTorch's current stream, for CUDA) is where a run's kernels go, for the calls under its
// QueueScope alone; scopes nest.
TEST(SecondDevice, KernelsRunOnTheCallersQueue) {
  void* const mine = reinterpret_cast<void*>(uintptr_t(0x5eed));
  void* const inner = reinterpret_cast<void*>(uintptr_t(0xbee));
  queues().clear();
  int64_t host_allocs = -1;
  {
    QueueScope scope(kTestDevice, mine);
    train(kTestDevice, &host_allocs);
    {
      QueueScope nested(kTestDevice, inner);
      EXPECT_EQ(test_memory().queue(), inner);
    }
    EXPECT_EQ(test_memory().queue(), mine);
  }
  EXPECT_EQ(test_memory().queue(), nullptr);
  ASSERT_EQ(queues().size(), 1u) << "kernels on the default queue: " << queues()[nullptr];
  EXPECT_GT(queues()[mine], 100);
  queues().clear();
  train(kTestDevice, &host_allocs);
  EXPECT_EQ(queues().size(), 1u);
  EXPECT_GT(queues()[nullptr], 100);
  QueueScope on_the_host(kCpu, mine);  // (the host has no queue: nothing to set)
}

TEST(SecondDevice, InputsOnAnotherDeviceAreRefused) {
  SessionOptions options;
  options.device = kTestDevice;
  Session s = training_session(mlp_with_loss(), TrainingSpec{{"w1", "b1", "w2"}, "loss"}, options);
  std::map<std::string, Tensor> feeds = {{"x", test_graphs::pattern_tensor({2, 8})},
                                         {"t", test_graphs::pattern_tensor({2, 4})},
                                         {"w1", test_graphs::pattern_tensor({8, 16})},
                                         {"b1", test_graphs::pattern_tensor({16})},
                                         {"w2", test_graphs::pattern_tensor({16, 4})}};
  EXPECT_THROW(s.run_forward(feeds), InputError);
}

// 4 optimizer steps of s, each over 2 accumulated micro-batches (host tensors, copied to s's device): each
// micro-batch's loss.
std::vector<double> train_session(TrainingSession& s) {
  std::vector<double> losses;
  for (int step = 0; step < 4; ++step) {
    for (int micro = 0; micro < 2; ++micro) {
      Tensor x = test_graphs::pattern_tensor({4, 8}), t = test_graphs::pattern_tensor({4, 4});
      for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = t.data<float>()[i] * 0.5f + 0.1f * float(micro);
      losses.push_back(s.train_step({{"x", x}, {"t", t}}));
    }
    s.optimizer_step();
    s.lazy_reset_grad();
  }
  return losses;
}

TEST(SecondDevice, ATrainingSessionTrainsThereAsOnTheCpu) {
  SessionOptions there;
  there.device = kTestDevice;
  const OptimizerOptions adamw{"adamw", 1e-2, 0.01};
  TrainingSession device = TrainingSession::from_bytes(test_graphs::mlp_model_bytes(), "loss", adamw, there);
  TrainingSession host = TrainingSession::from_bytes(test_graphs::mlp_model_bytes(), "loss", adamw);
  calls().clear();
  const std::vector<double> on_device = train_session(device), on_cpu = train_session(host);
  EXPECT_EQ(on_device, on_cpu);
  EXPECT_LT(on_device.back(), on_device.front());
  EXPECT_EQ(calls()["AdamW"], 4 * 3);       // 4 steps of 3 parameters, there
  EXPECT_EQ(calls()["accumulate"], 4 * 3);  // each second micro-batch's gradients
  for (const std::string& name : device.parameter_names()) {
    const Tensor& p = device.tensor(name);
    ASSERT_TRUE(p.device() == kTestDevice) << name;
    EXPECT_EQ(p.clone().to_double(), host.tensor(name).to_double()) << name;
  }
  // A checkpoint written there loads on the host, and back there: the same parameters and optimizer state.
  const std::string path = ::testing::TempDir() + "second_device.ckpt";
  device.save_checkpoint(path);
  TrainingSession resumed = TrainingSession::from_bytes(test_graphs::mlp_model_bytes(), "loss", adamw);
  resumed.load_checkpoint(path);
  device.load_checkpoint(path);
  EXPECT_EQ(resumed.step(), 4);
  for (const std::string& name : device.parameter_names())
    EXPECT_EQ(resumed.tensor(name).to_double(), host.tensor(name).to_double()) << name;
  EXPECT_EQ(train_session(resumed), train_session(device));
}

}  // namespace
}  // namespace onnxtrain
