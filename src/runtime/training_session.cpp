#include "onnxtrain/training_session.h"

#include <onnx/onnx_pb.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "ir/onnx_io.h"
#include "kernels/parameter_update.h"
#include "passes/pass.h"
#include "runtime/checkpoint.h"
#include "runtime/session_impl.h"

namespace onnxtrain {

double LrSchedule::factor(int64_t step) const {
  if (warmup_steps > 0 && step < warmup_steps) return double(step + 1) / double(warmup_steps);
  if (total_steps <= warmup_steps) return 1.0;
  double t = std::min(1.0, double(step - warmup_steps) / double(total_steps - warmup_steps));
  return 1.0 - t * (1.0 - final_fraction);
}

struct TrainingSession::Model {
  std::unique_ptr<ir::Graph> graph;
};

TrainingSession::TrainingSession(Model m, const std::string& loss, OptimizerOptions optimizer, SessionOptions options)
    : loss_(loss), opt_(optimizer) {
  std::unique_ptr<ir::Graph> model = std::move(m.graph);
  if (opt_.kind != "adamw" && opt_.kind != "sgd")
    throw InputError("optimizer '" + opt_.kind + "' is not supported (adamw, sgd)");
  onnx::ModelProto proto;
  ir::export_model(*model, &proto);
  model_bytes_ = proto.SerializeAsString();
  ir::Graph& g = *model;
  for (ir::Value* v : g.inputs) inputs_.push_back(v->name);
  // Float initializers become graph inputs fed from values_, so that no pass folds them.
  std::vector<std::string> wrt;
  std::vector<ir::Value*> keep;
  for (ir::Value* v : g.initializers) {
    if (!dtype_is_float(v->dtype)) {
      keep.push_back(v);
      continue;
    }
    values_[v->name] = *v->initializer;
    v->initializer.reset();
    g.inputs.push_back(v);
    wrt.push_back(v->name);
  }
  g.initializers = keep;
  // The optimizer's moments live here: AdamW keeps two per parameter, SGD with momentum one.
  options.optimizer_state_factor = opt_.kind == "adamw" ? 2.0 : opt_.momentum != 0 ? 1.0 : 0.0;
  // Training BatchNormalization's running statistics (ONNX's: the population variance) are written back into
  // their buffers after each step.
  TrainingSpec spec{wrt, loss, std::set<std::string>(wrt.begin(), wrt.end())};
  session_ = std::make_unique<Session>(training_session(std::move(model), spec, options));
  alloc_ = session_->impl().alloc;
  for (auto& [name, t] : values_) t = on_device(t);
  buffer_updates_ = session_->buffer_updates();
  const auto& reached = session_->grads_reached();
  for (size_t i = 0; i < wrt.size(); ++i) (reached[i] ? params_ : buffers_).push_back(wrt[i]);
}

TrainingSession TrainingSession::load(const std::string& path, const std::string& loss, OptimizerOptions optimizer,
                                      SessionOptions options) {
  return TrainingSession(Model{ir::load_model_file(path)}, loss, optimizer, std::move(options));
}

TrainingSession TrainingSession::from_bytes(const std::string& bytes, const std::string& loss,
                                            OptimizerOptions optimizer, SessionOptions options) {
  return TrainingSession(Model{ir::load_model_bytes(bytes)}, loss, optimizer, std::move(options));
}

Tensor TrainingSession::on_device(const Tensor& t) const {
  return t.device() == alloc_->device() ? t : t.clone(alloc_);
}

std::map<std::string, Tensor> TrainingSession::feeds(const std::map<std::string, Tensor>& inputs) const {
  std::map<std::string, Tensor> f;
  for (auto& [name, t] : inputs) f[name] = on_device(t);
  for (auto& [name, t] : values_) {
    if (inputs.count(name)) throw InputError("input '" + name + "' is a parameter of the model, owned by the session");
    f[name] = t;
  }
  return f;
}

double TrainingSession::train_step(const std::map<std::string, Tensor>& inputs) {
  auto [outs, state] = session_->run_forward(feeds(inputs));
  last_stash_ = state->stash_bytes();
  auto grads = session_->run_backward(*state);
  for (auto& [out, buffer] : buffer_updates_) values_.at(buffer).copy_from(outs.at(out));
  for (auto& name : params_) {
    Tensor& g = grads.at(name);
    auto it = grads_.find(name);
    if (reset_grad_ || it == grads_.end()) {
      grads_[name] = g.storage().use_count() > 1 ? g.clone(alloc_) : g;
      continue;
    }
    kernels::accumulate_gradient("train_step: " + name, it->second, g);
  }
  reset_grad_ = false;
  return outs.at(loss_).to_double()[0];
}

double TrainingSession::eval_step(const std::map<std::string, Tensor>& inputs) {
  auto [outs, state] = session_->run_forward(feeds(inputs));
  return outs.at(loss_).to_double()[0];
}

void TrainingSession::optimizer_step() {
  if (grads_.empty()) throw Error("optimizer_step: no gradients (call train_step first)");
  double lr = learning_rate();
  ++step_;
  for (auto& name : params_) {
    Tensor& x = values_.at(name);
    const Tensor& g = grads_.at(name);
    const bool first = !state1_.count(name);
    if (first) {
      state1_[name] = Tensor::zeros(x.dtype(), x.dims(), alloc_);
      state2_[name] = Tensor::zeros(x.dtype(), x.dims(), alloc_);
    }
    const std::string where = "optimizer_step: " + name;
    if (opt_.kind == "adamw") {
      kernels::AdamWHyper h;
      h.lr = lr, h.beta1 = opt_.beta1, h.beta2 = opt_.beta2, h.eps = opt_.eps, h.weight_decay = opt_.weight_decay;
      kernels::adamw_update(where, x, g, state1_[name], state2_[name], nullptr, step_, h);
    } else {  // PyTorch's SGD: the first step's momentum buffer is the gradient itself
      kernels::SgdHyper h;
      h.lr = lr, h.weight_decay = opt_.weight_decay, h.momentum = opt_.momentum, h.nesterov = opt_.nesterov;
      kernels::sgd_update(where, x, g, opt_.momentum > 0 ? &state1_[name] : nullptr, first, h);
    }
  }
}

void TrainingSession::save_checkpoint(const std::string& path) const {
  runtime::Checkpoint c;
  c.step = step_;
  c.learning_rate = opt_.lr;
  c.optimizer = opt_.kind;
  auto on_host = [](const Tensor& t) { return t.device() == kCpu ? t : t.clone(); };  // (a copy from a device)
  for (auto& n : params_) c.tensors["param/" + n] = on_host(values_.at(n));
  for (auto& n : buffers_) c.tensors["buffer/" + n] = on_host(values_.at(n));
  for (auto& [n, t] : state1_) c.tensors["state1/" + n] = on_host(t);
  for (auto& [n, t] : state2_) c.tensors["state2/" + n] = on_host(t);
  runtime::write_checkpoint(path, c);
}

void TrainingSession::load_checkpoint(const std::string& path) {
  runtime::Checkpoint c = runtime::read_checkpoint(path);
  std::string where = "checkpoint '" + path + "'";
  if (c.optimizer != opt_.kind)
    throw CheckpointError(where + ": written by optimizer '" + c.optimizer + "', this session uses '" + opt_.kind +
                          "'");
  auto take = [&](const std::string& key, const Tensor& like) {
    auto it = c.tensors.find(key);
    if (it == c.tensors.end()) throw CheckpointError(where + ": has no tensor '" + key + "'");
    if (it->second.dims() != like.dims() || it->second.dtype() != like.dtype())
      throw CheckpointError(where + ": '" + key + "' is " + dtype_name(it->second.dtype()) +
                            dims_str(it->second.dims()) + ", the model has " + dtype_name(like.dtype()) +
                            dims_str(like.dims()));
    return it->second;
  };
  std::map<std::string, Tensor> values, s1, s2;
  for (auto& n : params_) values[n] = take("param/" + n, values_.at(n));
  for (auto& n : buffers_) values[n] = take("buffer/" + n, values_.at(n));
  for (auto& [key, t] : c.tensors) {
    bool first = key.rfind("state1/", 0) == 0, second = key.rfind("state2/", 0) == 0;
    if (!first && !second) continue;
    auto param = values.find(key.substr(7));
    if (param == values.end()) throw CheckpointError(where + ": '" + key + "' is the state of no parameter");
    (first ? s1 : s2)[param->first] = take(key, param->second);
  }
  for (auto& [n, t] : values) values_.at(n).copy_from(t);  // in place: tensor() handed out stays the parameter
  for (auto& [n, t] : s1) t = on_device(t);
  for (auto& [n, t] : s2) t = on_device(t);
  state1_ = s1;
  state2_ = s2;
  step_ = c.step;
  opt_.lr = c.learning_rate;
  grads_.clear();
  reset_grad_ = true;
}

void TrainingSession::export_model_for_inferencing(const std::string& path, std::vector<std::string> outputs) const {
  auto g = ir::load_model_bytes(model_bytes_);
  for (ir::Value* v : g->initializers)
    if (values_.count(v->name)) v->initializer = values_.at(v->name).clone();
  if (outputs.empty())
    for (ir::Value* v : g->outputs)
      if (v->name != loss_) outputs.push_back(v->name);
  std::vector<ir::Value*> outs;
  for (auto& name : outputs) {
    ir::Value* v = g->find(name);
    if (!v) throw InputError("export: '" + name + "' is not a value of the model");
    outs.push_back(v);
  }
  g->outputs = outs;
  passes::dead_code()->apply(*g);
  // Inputs nothing reads any more (the loss's targets) are dropped.
  std::vector<ir::Value*> used;
  for (ir::Value* v : g->inputs)
    if (!v->consumers.empty() || std::find(outs.begin(), outs.end(), v) != outs.end()) used.push_back(v);
  g->inputs = used;
  std::vector<ir::Value*> inits;
  for (ir::Value* v : g->initializers)
    if (!v->consumers.empty()) inits.push_back(v);
  g->initializers = inits;
  ir::save_model_file(*g, path);
}

}  // namespace onnxtrain
