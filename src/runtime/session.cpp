#include "onnxtrain/session.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "ir/onnx_io.h"
#include "kernels/shape_inference.h"
#include "ops/bind.h"
#include "passes/pass.h"
#include "runtime/executor.h"
#include "runtime/schedule.h"

namespace onnxtrain {

// Activations only: views of inputs or parameters borrow memory the stash does not own.
int64_t RunState::stash_bytes() const {
  std::set<const Storage*> seen;
  int64_t total = 0;
  for (auto& [v, t] : env_)
    if (v->producer && t.storage() && t.storage()->allocator() && seen.insert(t.storage().get()).second)
      total += int64_t(t.storage()->bytes());
  return total;
}

std::map<std::string, int64_t> RunState::stash_values() const {
  std::map<std::string, int64_t> r;
  for (auto& [v, t] : env_)
    if (v->producer && t.storage() && t.storage()->allocator()) r[v->name] = int64_t(t.nbytes());
  return r;
}

Session::Session(std::unique_ptr<ir::Graph> graph, SessionOptions options)
    : graph_(std::move(graph)),
      options_(options),
      alloc_(options.allocator ? options.allocator : &CachingAllocator::of(options.device)) {
  ops::bind_graph(*graph_);
  kernels::infer_shapes(*graph_);
  forward_inputs_ = graph_->inputs;
  forward_outputs_ = graph_->outputs;
  init();
}

Session::Session(std::unique_ptr<ir::Graph> graph, const autodiff::TrainingSpec& spec, SessionOptions options)
    : options_(options), alloc_(options.allocator ? options.allocator : &CachingAllocator::of(options.device)) {
  std::vector<ir::Value*> inputs = graph->inputs;
  for (auto& name : spec.wrt)
    if (ir::Value* v = graph->find(name)) v->trainable = true;
  if (options_.optimize) {  // simplify and fuse the forward graph before differentiating it
    ops::bind_graph(*graph);
    kernels::infer_shapes(*graph);
    passes::run_passes(*graph, passes::default_passes());
  }
  autodiff::TrainingGraph tg = autodiff::build_training_graph(std::move(graph), spec);
  graph_ = std::move(tg.graph);
  training_ = true;
  forward_inputs_ = inputs;
  forward_outputs_ = tg.forward_outputs;
  output_grads_ = tg.output_grads;
  grads_ = tg.grads;
  reached_ = tg.reached;
  wrt_ = spec.wrt;
  init();
}

static int64_t evaluated_bytes(const ir::Value* v, const Bindings& dims) {
  Dim b = v->has_shape ? shape_numel(v->shape) * Dim(int64_t(dtype_size(v->dtype))) : Dim::symbol("?");
  auto x = b.eval(dims);
  if (!x)
    throw ConfigError("memory prediction: the size of '" + v->name + "' (" + b.str() +
                      ") needs dims that were not given");
  return *x;
}

// Bytes of the `wrt` inputs of g.
static int64_t parameter_bytes(const ir::Graph& g, const std::vector<std::string>& wrt, const Bindings& dims) {
  int64_t total = 0;
  for (auto& name : wrt) total += evaluated_bytes(g.find(name), dims);
  return total;
}

static int64_t planned_peak(const memory::AllocationPlan& plan, const Bindings& dims) {
  auto peak = plan.predicted_peak(dims);
  if (!peak) throw ConfigError("memory prediction: some sizes depend on data or on dims that were not given");
  return *peak;
}

void Session::init() {
  if (options_.optimize) {
    passes::run_passes(*graph_, passes::default_passes());
    // Folded constants (a Resize's scales, say) can make shapes known that were not: infer them again. (A
    // training graph was inferred after the forward graph's passes already.)
    if (!training_) kernels::infer_shapes(*graph_);
  }
  // Recompute clones go in after the passes (common-subexpression elimination would merge them back).
  if (training_) {
    unplanned_graph_ = graph_->clone();
    unplanned_plan_ = memory::AllocationPlan::build(*unplanned_graph_, runtime::schedule(*unplanned_graph_).order,
                                                    options_.allow_inplace, alloc_->device());
    memory::RecomputeOptions ro;
    ro.config = options_.memory_config;
    ro.level = options_.memory_level;
    ro.budget = options_.memory_budget;
    ro.budget.dims = options_.memory_dims;
    ro.step_peak = [this](const ir::Graph& g) {
      std::vector<const ir::Node*> order = runtime::schedule(g).order;
      int64_t params = parameter_bytes(g, wrt_, options_.memory_dims);
      return int64_t(double(params) * (1 + options_.optimizer_state_factor)) +
             planned_peak(memory::AllocationPlan::build(g, order, options_.allow_inplace, alloc_->device()),
                          options_.memory_dims);
    };
    report_ = memory::apply_recompute(*graph_, ro);
  }
  runtime::Schedule sched = runtime::schedule(*graph_);
  boundary_ = sched.boundary;
  plan_ = memory::AllocationPlan::build(*graph_, sched.order, options_.allow_inplace, alloc_->device());
  if (!(alloc_->device() == kCpu))
    for (const ir::Value* v : graph_->initializers) device_initializers_[v] = v->initializer->clone(alloc_);
}

Session Session::load(const std::string& path, SessionOptions options) {
  return Session(ir::load_model_file(path), options);
}

Session Session::from_bytes(const std::string& bytes, SessionOptions options) {
  return Session(ir::load_model_bytes(bytes), options);
}

MemoryPrediction Session::predict_memory(const Bindings& dims, bool without_plans) const {
  if (!training_) throw Error("predict_memory needs a session built for training");
  const ir::Graph& g = without_plans ? *unplanned_graph_ : *graph_;
  MemoryPrediction p;
  p.parameters = parameter_bytes(g, wrt_, dims);
  p.optimizer_state = int64_t(double(p.parameters) * options_.optimizer_state_factor);
  for (const ir::Value* v : grads_) p.gradients += evaluated_bytes(g.find(v->name), dims);
  for (const ir::Value* v : memory::stashed_values(g)) p.stash += evaluated_bytes(v, dims);
  // The plan's walk by category: its highest point is the peak (the allocator's, exactly).
  p.peak = -1;
  for (auto& live : predicted_live(without_plans, dims)) {
    int64_t total = 0;
    for (auto& [category, bytes] : live) total += bytes;
    if (total > p.peak) p.peak = total, p.at_peak = live;
  }
  p.peak = std::max<int64_t>(p.peak, 0);
  return p;
}

std::string Session::memory_report_text(const Bindings& dims, bool as_json) const {
  std::optional<MemoryPrediction> before, after;
  try {
    before = predict_memory(dims, true);
    after = predict_memory(dims);
  } catch (const ConfigError&) {  // dims not given: the report stays symbolic
  }
  if (as_json) {
    nlohmann::json j = nlohmann::json::parse(report_.json(dims));
    auto obj = [](const std::optional<MemoryPrediction>& p) {
      if (!p) return nlohmann::json(nullptr);
      return nlohmann::json{{"parameters", p->parameters},
                            {"optimizer_state", p->optimizer_state},
                            {"gradients", p->gradients},
                            {"stash", p->stash},
                            {"peak", p->peak},
                            {"at_peak", p->at_peak},
                            {"total", p->total()}};
    };
    j["predicted_before"] = obj(before);
    j["predicted_after"] = obj(after);
    return j.dump(2);
  }
  std::string r = report_.str(dims);
  if (before) r += "predicted without plans: " + before->str() + "\npredicted with plans:    " + after->str() + "\n";
  return r;
}

int64_t Session::largest_fitting(const std::string& symbol, Bindings dims, int64_t limit) const {
  auto fits = [&](int64_t v) {
    dims[symbol] = v;
    return predict_memory(dims).total() <= limit;
  };
  if (!fits(1)) return 0;
  int64_t lo = 1, hi = 2;
  while (hi < (int64_t(1) << 30) && fits(hi)) lo = hi, hi *= 2;
  while (hi - lo > 1) {
    int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

std::string MemoryPrediction::str() const {
  using memory::mib;
  auto part = [&](const char* c) { return at_peak.count(c) ? at_peak.at(c) : int64_t(0); };
  return "step peak " + mib(total()) + " = parameters " + mib(parameters) + " + optimizer state " +
         mib(optimizer_state) + " + " + mib(peak) + " during the step (at its highest: stash " + mib(part("stash")) +
         ", gradients " + mib(part("gradient")) + ", recomputed " + mib(part("recompute")) + ", transient " +
         mib(part("transient")) + (part("scratch") ? ", kernel scratch " + mib(part("scratch")) : std::string()) +
         "; the whole stash " + mib(stash) + ")";
}

void Session::set_profiling(bool on) { profile_ = on ? std::make_unique<runtime::Profile>() : nullptr; }

static std::vector<std::string> names_of(const std::vector<ir::Value*>& vs) {
  std::vector<std::string> r;
  for (auto* v : vs)
    if (v) r.push_back(v->name);
  return r;
}

std::vector<std::string> Session::input_names() const { return names_of(forward_inputs_); }
std::vector<std::string> Session::output_names() const { return names_of(forward_outputs_); }
std::vector<std::string> Session::grad_names() const { return wrt_; }
std::vector<std::string> Session::output_grad_names() const {
  std::vector<std::string> r;
  for (size_t i = 0; i < output_grads_.size(); ++i)
    if (output_grads_[i]) r.push_back(forward_outputs_[i]->name);
  return r;
}

Bindings Session::bind_inputs(const std::map<std::string, std::vector<int64_t>>& dims,
                              const std::map<std::string, DType>& dtypes, bool forward_only) const {
  const std::vector<ir::Value*>& inputs = forward_only ? forward_inputs_ : graph_->inputs;
  for (auto& [name, d] : dims) {
    bool known = false;
    for (auto* v : inputs) known = known || v->name == name;
    if (!known)
      throw InputError("input '" + name + "' is not an input of the model (inputs: " + [&] {
        std::string names;
        for (auto* v : inputs) names += (names.empty() ? "" : ", ") + v->name;
        return names;
      }() + ")");
  }
  Bindings b;
  for (const ir::Value* v : inputs) {
    auto it = dims.find(v->name);
    if (it == dims.end()) throw InputError("input '" + v->name + "' of type " + v->type_str() + " is missing");
    auto dt = dtypes.find(v->name);
    if (dt != dtypes.end() && dt->second != v->dtype)
      throw InputError("input '" + v->name + "': dtype " + dtype_name(dt->second) + " given, the model expects " +
                       dtype_name(v->dtype));
    const auto& d = it->second;
    if (!v->has_shape) continue;
    if (d.size() != v->shape.size())
      throw InputError("input '" + v->name + "': rank " + std::to_string(d.size()) + " given " + dims_str(d) +
                       ", the model expects " + v->type_str());
    for (size_t i = 0; i < d.size(); ++i) {
      const Dim& want = v->shape[i];
      std::vector<std::string> syms;
      want.symbols(&syms);
      if (want.is_const()) {
        if (want.value() != d[i])
          throw InputError("input '" + v->name + "': dim " + std::to_string(i) + " is " + std::to_string(d[i]) +
                           ", the model expects " + v->type_str());
      } else if (syms.size() == 1 && want == Dim::symbol(syms[0])) {
        auto [pos, fresh] = b.emplace(syms[0], d[i]);
        if (!fresh && pos->second != d[i])
          throw InputError("input '" + v->name + "': dim " + std::to_string(i) + " ('" + syms[0] + "') is " +
                           std::to_string(d[i]) + " but another input gave it " + std::to_string(pos->second));
      }
    }
  }
  return b;
}

void Session::feed(runtime::Env& env, const std::map<std::string, Tensor>& feeds, bool forward_only) const {
  std::map<std::string, std::vector<int64_t>> dims;
  std::map<std::string, DType> dtypes;
  for (auto& [k, t] : feeds) {
    dims[k] = t.dims();
    dtypes[k] = t.dtype();
  }
  bind_inputs(dims, dtypes, forward_only);
  for (const ir::Value* v : forward_only ? forward_inputs_ : graph_->inputs) {
    const Tensor& t = feeds.at(v->name);
    if (!(t.device() == alloc_->device()))
      throw InputError("input '" + v->name + "' is on " + t.device().str() + ", the session runs on " +
                       alloc_->device().str());
    env[v] = t;
  }
  for (const ir::Value* v : graph_->initializers)
    env[v] = device_initializers_.empty() ? *v->initializer : device_initializers_.at(v);
}

std::map<std::string, Tensor> Session::run(const std::map<std::string, Tensor>& feeds) {
  runtime::Env env;
  feed(env, feeds, false);
  runtime::execute(plan_, 0, plan_.steps().size(), env, alloc_, next_seed(), profile_.get(), recorder_.get());
  std::map<std::string, Tensor> out;
  for (const ir::Value* v : graph_->outputs) out[v->name] = env.at(v);
  return out;
}

std::pair<std::map<std::string, Tensor>, std::unique_ptr<RunState>> Session::run_forward(
    const std::map<std::string, Tensor>& feeds, std::optional<uint64_t> seed) {
  if (!training_) throw Error("run_forward needs a session built for training");
  auto state = std::make_unique<RunState>();
  state->seed_ = seed ? *seed : next_seed();
  feed(state->env_, feeds, true);
  runtime::execute(plan_, 0, boundary_, state->env_, alloc_, state->seed_, profile_.get(), recorder_.get());
  std::map<std::string, Tensor> out;
  for (const ir::Value* v : forward_outputs_) {
    out[v->name] = state->env_.at(v);
    bool read_in_backward = false;
    for (const ir::Node* c : v->consumers) read_in_backward = read_in_backward || c->backward;
    if (!read_in_backward) state->env_.erase(v);  // the caller holds it; the stash does not
  }
  return {out, std::move(state)};
}

std::map<std::string, Tensor> Session::run_backward(RunState& state,
                                                    const std::map<std::string, Tensor>& output_grads) {
  if (!training_) throw Error("run_backward needs a session built for training");
  if (state.consumed_) throw Error("run_backward: this RunState was already used by a backward call");
  for (auto& [name, t] : output_grads) {
    auto it = std::find_if(forward_outputs_.begin(), forward_outputs_.end(), [&](auto* v) { return v->name == name; });
    if (it == forward_outputs_.end())
      throw InputError("output gradient for '" + name + "', which is not a model output");
    ir::Value* gin = output_grads_[size_t(it - forward_outputs_.begin())];
    if (!gin) throw InputError("output '" + name + "' does not depend on any input that needs a gradient");
    if (t.dtype() != gin->dtype)
      throw InputError("output gradient '" + name + "': dtype " + dtype_name(t.dtype()) + ", expected " +
                       dtype_name(gin->dtype));
    state.env_[gin] = t;
  }
  for (ir::Value* gin : output_grads_)
    if (gin && !state.env_.count(gin)) {
      const ir::Value* out =
          forward_outputs_[size_t(std::find(output_grads_.begin(), output_grads_.end(), gin) - output_grads_.begin())];
      throw InputError("output gradient for '" + out->name + "' is missing");
    }
  state.consumed_ = true;
  runtime::execute(plan_, boundary_, plan_.steps().size(), state.env_, alloc_, state.seed_, profile_.get(),
                   recorder_.get());
  std::map<std::string, Tensor> grads;
  for (size_t i = 0; i < grads_.size(); ++i) grads[wrt_[i]] = state.env_.at(grads_[i]);
  state.env_.clear();
  return grads;
}

}  // namespace onnxtrain
