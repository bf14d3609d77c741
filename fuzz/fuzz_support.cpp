#include "fuzz/fuzz_support.h"

#include <onnx/onnx_pb.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>

#include "core/allocator.h"
#include "ir/onnx_io.h"
#include "memory/budget.h"
#include "memory/recompute.h"
#include "onnxtrain/session.h"
#include "onnxtrain/training_session.h"
#include "runtime/session_impl.h"
#include "tests/cpp/test_graphs.h"

namespace onnxtrain::fuzz {

static void fill(Tensor& t) {
  int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) {
    double v = dtype_is_float(t.dtype()) ? double((i * 7) % 13) / 13.0 - 0.5 : double(i % 3);
    switch (t.dtype()) {
      case DType::kFloat32:
        t.data<float>()[i] = float(v);
        break;
      case DType::kFloat64:
        t.data<double>()[i] = v;
        break;
      case DType::kFloat16:
        t.data<Half>()[i] = Half(float(v));
        break;
      case DType::kBFloat16:
        t.data<BFloat16>()[i] = BFloat16(float(v));
        break;
      case DType::kInt64:
        t.data<int64_t>()[i] = int64_t(v);
        break;
      case DType::kInt32:
        t.data<int32_t>()[i] = int32_t(v);
        break;
      case DType::kInt8:
        t.data<int8_t>()[i] = int8_t(v);
        break;
      case DType::kUInt8:
        t.data<uint8_t>()[i] = uint8_t(v);
        break;
      case DType::kBool:
        t.data<bool>()[i] = i % 2;
        break;
      default:
        return;
    }
  }
}

static Tensor pattern_like(const Tensor& like) {
  Tensor t(like.dtype(), like.dims());
  fill(t);
  return t;
}

std::optional<std::map<std::string, Tensor>> small_inputs(const std::vector<ir::Value*>& inputs) {
  std::map<std::string, Tensor> feeds;
  for (const ir::Value* v : inputs) {
    if (!v->has_shape || v->dtype == DType::kUndefined) return std::nullopt;
    std::vector<std::string> symbols;
    for (const Dim& d : v->shape) d.symbols(&symbols);
    Bindings twos;
    for (auto& s : symbols) twos[s] = 2;
    std::vector<int64_t> dims;
    int64_t elements = 1;
    for (const Dim& d : v->shape) {
      std::optional<int64_t> n = d.eval(twos);
      if (!n || *n < 0 || *n > kMaxInputElements) return std::nullopt;
      elements *= *n;
      if (elements > kMaxInputElements) return std::nullopt;
      dims.push_back(*n);
    }
    Tensor t(v->dtype, dims);
    fill(t);
    feeds[v->name] = t;
  }
  return feeds;
}

static void limit_host_memory() { CachingAllocator::global().set_limit(kAllocatorLimit); }

void run_model(const std::string& bytes) {
  limit_host_memory();
  Session s = Session::from_bytes(bytes);
  if (auto feeds = small_inputs(s.impl().exe.forward_inputs)) s.run(*feeds);
}

void train_model(const std::string& bytes) {
  limit_host_memory();
  auto graph = ir::load_model_bytes(bytes);
  TrainingSpec spec;
  for (const ir::Value* v : graph->inputs)
    if (dtype_is_float(v->dtype)) spec.wrt.push_back(v->name);
  for (const ir::Value* v : graph->initializers)
    if (dtype_is_float(v->dtype)) spec.wrt.push_back(v->name);
  if (spec.wrt.empty()) return;
  SessionOptions options;
  options.memory_level = int(bytes.size() % 3);
  Session s = training_session(std::move(graph), spec, options);
  auto feeds = small_inputs(s.impl().exe.forward_inputs);
  if (!feeds) return;
  auto [outputs, state] = s.run_forward(*feeds);
  std::map<std::string, Tensor> output_grads;
  for (const std::string& name : s.output_grad_names()) output_grads[name] = pattern_like(outputs.at(name));
  s.run_backward(*state, output_grads);
}

namespace {

std::unique_ptr<TrainingSession> mlp_session(const std::string& kind) {
  auto g = test_graphs::mlp_graph();
  ir::Value* loss = test_graphs::add_op(*g, "ReduceMean", {g->outputs.at(0)}, {{"keepdims", int64_t(0)}});
  g->outputs = {loss};
  OptimizerOptions opt;
  opt.kind = kind;
  opt.momentum = 0.9;
  onnx::ModelProto model;
  ir::export_model(*g, &model);
  auto s = std::make_unique<TrainingSession>(TrainingSession::from_bytes(model.SerializeAsString(), loss->name, opt));
  s->train_step({{"x", test_graphs::pattern_tensor({4, 8})}});
  s->optimizer_step();
  return s;
}

struct CheckpointTargets {
  std::unique_ptr<TrainingSession> adamw = mlp_session("adamw"), sgd = mlp_session("sgd");
  std::string scratch = "/tmp/onnxtrain-fuzz-checkpoint-" + std::to_string(getpid());
  ~CheckpointTargets() { std::remove(scratch.c_str()); }  // the scratch file leaves with the process
};

CheckpointTargets& checkpoint_targets() {
  static CheckpointTargets t;
  return t;
}

}  // namespace

void load_checkpoint(const std::string& bytes) {
  CheckpointTargets& t = checkpoint_targets();
  limit_host_memory();
  std::ofstream(t.scratch, std::ios::binary | std::ios::trunc) << bytes;
  (bytes.size() % 2 ? t.sgd : t.adamw)->load_checkpoint(t.scratch);
}

void write_checkpoint_seeds(const std::string& folder) {
  CheckpointTargets& t = checkpoint_targets();
  t.adamw->save_checkpoint(folder + "/adamw.ckpt");
  t.sgd->save_checkpoint(folder + "/sgd-momentum.ckpt");
}

void parse_memory_settings(const std::string& text) {
  auto each = [](auto f) {
    try {
      f();
    } catch (const Error&) {
    }
  };
  each([&] { memory::parse_config(text); });
  each([&] { memory::parse_budget(text); });
  each([&] { parse_size(text, "size"); });
}

}  // namespace onnxtrain::fuzz
