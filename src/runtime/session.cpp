#include "onnxtrain/session.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>

#include "ir/onnx_io.h"
#include "ops/op.h"
#include "runtime/executor.h"

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

// Per step, the `wrt` gradients handed over after it: as soon as a backward step makes them final, or, for those an
// optimizer applies in backward, at their handoff step; last, one more entry: those no step makes.
static std::vector<std::vector<size_t>> gradients_by_step(const memory::Executable& exe) {
  const auto& steps = exe.plan.steps();
  std::vector<std::vector<size_t>> r(steps.size() + 1);
  std::unordered_map<const ir::Value*, std::vector<size_t>> wanted;
  for (size_t i = 0; i < exe.grads.size(); ++i) {
    if (i < exe.handoff.size() && exe.handoff[i] >= 0)
      r[size_t(exe.handoff[i])].push_back(i);
    else
      wanted[exe.grads[i]].push_back(i);
  }
  for (size_t s = exe.boundary; s < steps.size(); ++s)
    for (const ir::Value* out : steps[s].node->outputs) {
      auto it = wanted.find(out);
      if (it == wanted.end()) continue;
      r[s].insert(r[s].end(), it->second.begin(), it->second.end());
      wanted.erase(it);
    }
  for (auto& [v, at] : wanted) r.back().insert(r.back().end(), at.begin(), at.end());
  std::sort(r.back().begin(), r.back().end());
  return r;
}

Session::Session(memory::Executable exe, SessionOptions options)
    : exe_(std::move(exe)),
      gradients_by_step_(gradients_by_step(exe_)),
      options_(options),
      alloc_(options.allocator ? options.allocator : &CachingAllocator::of(options.device)) {
  if (!(alloc_->device() == kCpu))
    for (const ir::Value* v : exe_.graph->initializers) device_initializers_[v] = v->initializer->clone(alloc_);
}

// A given allocator decides the device the graph is compiled for.
static SessionOptions on_allocators_device(SessionOptions o) {
  if (o.allocator) o.device = o.allocator->device();
  return o;
}

Session::Session(std::unique_ptr<ir::Graph> graph, SessionOptions options)
    : Session(runtime::compile_inference(std::move(graph), on_allocators_device(options)), options) {}

Session::Session(std::unique_ptr<ir::Graph> graph, const autodiff::TrainingSpec& spec, SessionOptions options)
    : Session(runtime::compile_training(std::move(graph), spec, on_allocators_device(options)), options) {}

Session Session::load(const std::string& path, SessionOptions options) {
  return Session(ir::load_model_file(path), options);
}

Session Session::from_bytes(const std::string& bytes, SessionOptions options) {
  return Session(ir::load_model_bytes(bytes), options);
}

MemoryPrediction Session::predict_memory(const Bindings& dims, bool without_plans) const {
  if (!exe_.training) throw Error("predict_memory needs a session built for training");
  return memory::predict(without_plans ? *exe_.without_plans : exe_, dims);
}

std::string Session::memory_report_text(const Bindings& dims, bool as_json) const {
  return memory::report_text(exe_, dims, as_json);
}

int64_t Session::largest_fitting(const std::string& symbol, Bindings dims, int64_t limit) const {
  return memory::largest_fitting(exe_, symbol, std::move(dims), limit);
}

void Session::set_profiling(bool on) { profile_ = on ? std::make_unique<runtime::Profile>() : nullptr; }

static std::vector<std::string> names_of(const std::vector<ir::Value*>& vs) {
  std::vector<std::string> r;
  for (auto* v : vs)
    if (v) r.push_back(v->name);
  return r;
}

std::vector<std::string> Session::input_names() const { return names_of(exe_.forward_inputs); }
std::vector<std::string> Session::output_names() const { return names_of(exe_.forward_outputs); }
std::vector<std::string> Session::grad_names() const { return exe_.wrt; }
// Whether every reader of the output gradient `gin` takes it unset (read as zeros).
bool Session::output_grad_may_be_unset(const ir::Value* gin) const {
  return std::all_of(gin->consumers.begin(), gin->consumers.end(), [gin](const ir::Node* n) {
    for (size_t i = 0; i < n->inputs.size(); ++i)
      if (n->inputs[i] == gin && !n->op->input_may_be_unset(i)) return false;
    return true;
  });
}

std::vector<std::string> Session::optional_output_grad_names() const {
  std::vector<std::string> r;
  for (size_t i = 0; i < exe_.output_grads.size(); ++i)
    if (exe_.output_grads[i] && output_grad_may_be_unset(exe_.output_grads[i]))
      r.push_back(exe_.forward_outputs[i]->name);
  return r;
}

std::vector<std::string> Session::output_grad_names() const {
  std::vector<std::string> r;
  for (size_t i = 0; i < exe_.output_grads.size(); ++i)
    if (exe_.output_grads[i]) r.push_back(exe_.forward_outputs[i]->name);
  return r;
}

Bindings Session::bind_inputs(const std::map<std::string, std::vector<int64_t>>& dims,
                              const std::map<std::string, DType>& dtypes, bool forward_only) const {
  const std::vector<ir::Value*>& inputs = forward_only ? exe_.forward_inputs : exe_.graph->inputs;
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

Bindings Session::feed(runtime::Env& env, const std::map<std::string, Tensor>& feeds, bool forward_only) const {
  std::map<std::string, std::vector<int64_t>> dims;
  std::map<std::string, DType> dtypes;
  for (auto& [k, t] : feeds) {
    dims[k] = t.dims();
    dtypes[k] = t.dtype();
  }
  Bindings bound = bind_inputs(dims, dtypes, forward_only);
  for (const ir::Value* v : forward_only ? exe_.forward_inputs : exe_.graph->inputs) {
    const Tensor& t = feeds.at(v->name);
    if (!(t.device() == alloc_->device()))
      throw InputError("input '" + v->name + "' is on " + t.device().str() + ", the session runs on " +
                       alloc_->device().str());
    env[v] = t;
  }
  for (const ir::Value* v : exe_.graph->initializers)
    env[v] = device_initializers_.empty() ? *v->initializer : device_initializers_.at(v);
  return bound;
}

std::map<std::string, Tensor> Session::run(const std::map<std::string, Tensor>& feeds) {
  runtime::MemoryRecorder::Scope recording(recorder_.get());
  std::map<std::string, Tensor> out;
  {
    runtime::Env env;
    const Bindings dims = feed(env, feeds, false);
    runtime::execute(exe_.plan, 0, exe_.plan.steps().size(), env, alloc_, next_seed(), dims, profile_.get(),
                     recorder_.get());
    for (const ir::Value* v : exe_.graph->outputs) out[v->name] = env.at(v);
  }
  end_of_step();
  return out;
}

void Session::end_of_step() {
  if (!options_.keep_cache) alloc_->trim_when_idle(options_.release_cache_after);
}

std::pair<std::map<std::string, Tensor>, std::unique_ptr<RunState>> Session::run_forward(
    const std::map<std::string, Tensor>& feeds, std::optional<uint64_t> seed) {
  if (!exe_.training) throw Error("run_forward needs a session built for training");
  runtime::MemoryRecorder::Scope recording(recorder_.get());
  auto state = std::make_unique<RunState>();
  state->seed_ = seed ? *seed : next_seed();
  state->dims_ = feed(state->env_, feeds, true);
  runtime::execute(exe_.plan, 0, exe_.boundary, state->env_, alloc_, state->seed_, state->dims_, profile_.get(),
                   recorder_.get());
  std::map<std::string, Tensor> out;
  for (const ir::Value* v : exe_.forward_outputs) {
    out[v->name] = state->env_.at(v);
    bool read_in_backward = false;
    for (const ir::Node* c : v->consumers) read_in_backward = read_in_backward || c->backward;
    if (!read_in_backward) state->env_.erase(v);  // the caller holds it; the stash does not
  }
  return {out, std::move(state)};
}

// Where the stash reads the memory an input was fed, the same bytes at their new place.
static void refeed(runtime::Env& env, const std::vector<ir::Value*>& inputs,
                   const std::map<std::string, Tensor>& refeeds) {
  for (auto& [name, t] : refeeds) {
    auto in = std::find_if(inputs.begin(), inputs.end(), [&name = name](auto* v) { return v->name == name; });
    if (in == inputs.end()) throw InputError("refeed of '" + name + "', which is not a forward input");
    auto held = env.find(*in);
    if (held == env.end()) continue;  // backward does not read it
    if (t.dtype() != held->second.dtype() || t.dims() != held->second.dims())
      throw InputError("refeed of '" + name + "': " + dtype_name(t.dtype()) + " " + dims_str(t.dims()) +
                       ", the forward was fed " + dtype_name(held->second.dtype()) + " " +
                       dims_str(held->second.dims()));
    const std::shared_ptr<Storage> old = held->second.storage();
    for (auto& [v, u] : env)
      if (u.storage() == old) u = Tensor(u.dtype(), u.dims(), t.storage());
  }
}

std::map<std::string, Tensor> Session::run_backward(RunState& state, const std::map<std::string, Tensor>& output_grads,
                                                    const std::map<std::string, Tensor>& refeeds,
                                                    const GradientReady& on_gradient) {
  if (!exe_.training) throw Error("run_backward needs a session built for training");
  if (state.consumed_) throw Error("run_backward: this RunState was already used by a backward call");
  runtime::MemoryRecorder::Scope recording(recorder_.get());
  refeed(state.env_, exe_.forward_inputs, refeeds);
  for (auto& [name, t] : output_grads) {
    auto it = std::find_if(exe_.forward_outputs.begin(), exe_.forward_outputs.end(),
                           [&name = name](auto* v) { return v->name == name; });
    if (it == exe_.forward_outputs.end())
      throw InputError("output gradient for '" + name + "', which is not a model output");
    ir::Value* gin = exe_.output_grads[size_t(it - exe_.forward_outputs.begin())];
    if (!gin) throw InputError("output '" + name + "' does not depend on any input that needs a gradient");
    if (t.dtype() != gin->dtype)
      throw InputError("output gradient '" + name + "': dtype " + dtype_name(t.dtype()) + ", expected " +
                       dtype_name(gin->dtype));
    state.env_[gin] = t;
  }
  for (size_t i = 0; i < exe_.output_grads.size(); ++i) {
    const ir::Value* gin = exe_.output_grads[i];
    if (gin && !state.env_.count(gin) && !output_grad_may_be_unset(gin))
      throw InputError("output gradient for '" + exe_.forward_outputs[i]->name + "' is missing");
  }
  state.consumed_ = true;
  std::function<void(size_t)> after_step;
  if (on_gradient)
    after_step = [&](size_t step) {
      for (size_t i : gradients_by_step_[step]) on_gradient(exe_.wrt[i], state.env_.at(exe_.grads[i]));
    };
  runtime::execute(exe_.plan, exe_.boundary, exe_.plan.steps().size(), state.env_, alloc_, state.seed_, state.dims_,
                   profile_.get(), recorder_.get(), after_step);
  if (on_gradient)  // (gradients no backward step makes: an input's, or an output gradient's passed through)
    for (size_t i : gradients_by_step_.back()) on_gradient(exe_.wrt[i], state.env_.at(exe_.grads[i]));
  std::map<std::string, Tensor> grads;  // (but those applied in backward, freed already)
  for (size_t i = 0; i < exe_.grads.size(); ++i)
    if (exe_.handoff.empty() || exe_.handoff[i] < 0) grads[exe_.wrt[i]] = state.env_.at(exe_.grads[i]);
  state.env_.clear();
  end_of_step();
  return grads;
}

std::vector<std::string> Session::gradient_order() const {
  std::vector<std::string> r;
  if (!exe_.training) return r;
  for (const auto& at : gradients_by_step_)
    for (size_t i : at) r.push_back(exe_.wrt[i]);
  return r;
}

}  // namespace onnxtrain
