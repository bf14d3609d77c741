#include "runtime/session_impl.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>

#include "ir/onnx_io.h"
#include "ops/op.h"
#include "runtime/executor.h"

namespace onnxtrain {

RunState::RunState(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RunState::~RunState() = default;
uint64_t RunState::seed() const { return impl_->seed; }

// Activations only: views of inputs or parameters borrow memory the stash does not own.
int64_t RunState::stash_bytes() const {
  std::set<const Storage*> seen;
  int64_t total = 0;
  for (auto& [v, t] : impl_->env)
    if (v->producer && t.storage() && t.storage()->allocator() && seen.insert(t.storage().get()).second)
      total += int64_t(t.storage()->bytes());
  return total;
}

std::map<std::string, int64_t> RunState::stash_values() const {
  std::map<std::string, int64_t> r;
  for (auto& [v, t] : impl_->env)
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

Session::Impl::Impl(memory::Executable e, SessionOptions o)
    : exe(std::move(e)),
      gradients_by_step(onnxtrain::gradients_by_step(exe)),
      options(std::move(o)),
      alloc(options.allocator ? options.allocator : &CachingAllocator::of(options.device)),
      node_caches(exe.plan.steps().size()) {
  if (!(alloc->device() == kCpu))
    for (const ir::Value* v : exe.graph->initializers) device_initializers[v] = v->initializer->clone(alloc);
}

void Session::Impl::execute(size_t begin, size_t end, runtime::Env& env, uint64_t seed, const Bindings& dims,
                            std::function<void(size_t)> after_step) {
  std::unique_lock<std::mutex> caching(caches_mu, std::try_to_lock);
  runtime::Execution x{alloc, seed, &dims, profile.get(), recorder.get(), std::move(after_step),
                       caching.owns_lock() ? node_caches.data() : nullptr};
  runtime::execute(exe.plan, begin, end, env, x);
}

Session::Session(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;
Session::~Session() = default;

runtime::CompileOptions compile_options(const SessionOptions& o) {
  runtime::CompileOptions c;
  c.allow_inplace = o.allow_inplace;
  c.optimize = o.optimize;
  c.device = o.allocator ? o.allocator->device() : o.device;  // a given allocator decides the device
  c.memory.level = o.memory_level;
  c.memory.config = memory::parse_config(o.memory_config);
  c.memory.budget = memory::parse_budget(o.memory_budget);
  c.memory.dims = o.memory_dims;
  c.memory.optimizer_state_factor = o.optimizer_state_factor;
  c.memory.applied_in_backward = o.applied_in_backward;
  return c;
}

Session inference_session(std::unique_ptr<ir::Graph> graph, SessionOptions options) {
  auto exe = runtime::compile_inference(std::move(graph), compile_options(options));
  return Session(std::make_unique<Session::Impl>(std::move(exe), std::move(options)));
}

Session training_session(std::unique_ptr<ir::Graph> graph, const TrainingSpec& spec, SessionOptions options) {
  auto exe = runtime::compile_training(std::move(graph), spec, compile_options(options));
  return Session(std::make_unique<Session::Impl>(std::move(exe), std::move(options)));
}

Session Session::load(const std::string& path, SessionOptions options) {
  return inference_session(ir::load_model_file(path), std::move(options));
}

Session Session::from_bytes(const std::string& bytes, SessionOptions options) {
  return inference_session(ir::load_model_bytes(bytes), std::move(options));
}

Session Session::load(const std::string& path, const TrainingSpec& spec, SessionOptions options) {
  return training_session(ir::load_model_file(path), spec, std::move(options));
}

Session Session::from_bytes(const std::string& bytes, const TrainingSpec& spec, SessionOptions options) {
  return training_session(ir::load_model_bytes(bytes), spec, std::move(options));
}

void Session::save(const std::string& path) const { ir::save_model_file(impl_->graph(), path); }

bool Session::is_training() const { return impl_->exe.training; }
const std::vector<bool>& Session::grads_reached() const { return impl_->exe.reached; }
const std::map<std::string, std::string>& Session::buffer_updates() const { return impl_->exe.buffer_updates; }

std::optional<int64_t> Session::predicted_peak(const Bindings& dims) const {
  return impl_->exe.plan.predicted_peak(dims);
}

std::map<std::string, OpProfile> Session::profile() const {
  std::map<std::string, OpProfile> r;
  if (impl_->profile)
    for (auto& [op, ms] : impl_->profile->ms_by_op) r[op] = {ms, impl_->profile->calls_by_op.at(op)};
  return r;
}

MemoryPrediction Session::predict_memory(const Bindings& dims, bool without_plans) const {
  if (!impl_->exe.training) throw Error("predict_memory needs a session built for training");
  return memory::predict(without_plans ? *impl_->exe.without_plans : impl_->exe, dims);
}

std::string Session::memory_report_text(const Bindings& dims, bool as_json) const {
  return memory::report_text(impl_->exe, dims, as_json);
}

int64_t Session::largest_fitting(const std::string& symbol, Bindings dims, int64_t limit) const {
  return memory::largest_fitting(impl_->exe, symbol, std::move(dims), limit);
}

void Session::set_profiling(bool on) { impl_->profile = on ? std::make_unique<runtime::Profile>() : nullptr; }

static std::vector<std::string> names_of(const std::vector<ir::Value*>& vs) {
  std::vector<std::string> r;
  for (auto* v : vs)
    if (v) r.push_back(v->name);
  return r;
}

std::vector<std::string> Session::input_names() const { return names_of(impl_->exe.forward_inputs); }
std::vector<std::string> Session::output_names() const { return names_of(impl_->exe.forward_outputs); }
std::vector<std::string> Session::grad_names() const { return impl_->exe.wrt; }

static const ir::Value* forward_input(const memory::Executable& exe, const std::string& name) {
  for (const ir::Value* v : exe.forward_inputs)
    if (v->name == name) return v;
  throw InputError("'" + name + "' is not an input of the model");
}

DType Session::input_dtype(const std::string& name) const { return forward_input(impl_->exe, name)->dtype; }

std::vector<int64_t> Session::input_dims(const std::string& name, const Bindings& dims) const {
  const ir::Value* v = forward_input(impl_->exe, name);
  if (auto shape = v->has_shape ? eval_shape(v->shape, dims) : std::nullopt) return *shape;
  std::vector<std::string> syms;
  for (const Dim& d : v->shape) d.symbols(&syms);
  std::string missing;
  for (const std::string& s : std::set<std::string>(syms.begin(), syms.end()))
    if (!dims.count(s)) missing += (missing.empty() ? "" : ", ") + s;
  throw InputError("input '" + name + "' " + v->type_str() + " needs the size of " +
                   (v->has_shape ? missing : std::string("its unknown shape")));
}
// Whether every reader of the output gradient `gin` takes it unset (read as zeros).
bool Session::Impl::output_grad_may_be_unset(const ir::Value* gin) const {
  return std::all_of(gin->consumers.begin(), gin->consumers.end(), [gin](const ir::Node* n) {
    for (size_t i = 0; i < n->inputs.size(); ++i)
      if (n->inputs[i] == gin && !n->op->input_may_be_unset(i)) return false;
    return true;
  });
}

std::vector<std::string> Session::optional_output_grad_names() const {
  const Impl& p = *impl_;
  const memory::Executable& exe = p.exe;
  std::vector<std::string> r;
  for (size_t i = 0; i < exe.output_grads.size(); ++i)
    if (exe.output_grads[i] && p.output_grad_may_be_unset(exe.output_grads[i]))
      r.push_back(exe.forward_outputs[i]->name);
  return r;
}

std::vector<std::string> Session::output_grad_names() const {
  const memory::Executable& exe = impl_->exe;
  std::vector<std::string> r;
  for (size_t i = 0; i < exe.output_grads.size(); ++i)
    if (exe.output_grads[i]) r.push_back(exe.forward_outputs[i]->name);
  return r;
}

Bindings Session::bind_inputs(const std::map<std::string, std::vector<int64_t>>& dims,
                              const std::map<std::string, DType>& dtypes, bool forward_only) const {
  const memory::Executable& exe = impl_->exe;
  const std::vector<ir::Value*>& inputs = forward_only ? exe.forward_inputs : exe.graph->inputs;
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
      if (want.is_const()) {
        if (want.value() != d[i])
          throw InputError("input '" + v->name + "': dim " + std::to_string(i) + " is " + std::to_string(d[i]) +
                           ", the model expects " + v->type_str());
      } else if (auto name = want.lone_symbol()) {
        auto [pos, fresh] = b.emplace(*name, d[i]);
        if (!fresh && pos->second != d[i])
          throw InputError("input '" + v->name + "': dim " + std::to_string(i) + " ('" + *name + "') is " +
                           std::to_string(d[i]) + " but another input gave it " + std::to_string(pos->second));
      }
    }
  }
  return b;
}

Bindings Session::Impl::feed(const Session& s, runtime::Env& env, const std::map<std::string, Tensor>& feeds,
                             bool forward_only) const {
  std::map<std::string, std::vector<int64_t>> dims;
  std::map<std::string, DType> dtypes;
  for (auto& [k, t] : feeds) {
    dims[k] = t.dims();
    dtypes[k] = t.dtype();
  }
  Bindings bound = s.bind_inputs(dims, dtypes, forward_only);
  for (const ir::Value* v : forward_only ? exe.forward_inputs : exe.graph->inputs) {
    const Tensor& t = feeds.at(v->name);
    if (!(t.device() == alloc->device()))
      throw InputError("input '" + v->name + "' is on " + t.device().str() + ", the session runs on " +
                       alloc->device().str());
    env[v] = t;
  }
  for (const ir::Value* v : exe.graph->initializers)
    env[v] = device_initializers.empty() ? *v->initializer : device_initializers.at(v);
  return bound;
}

std::map<std::string, Tensor> Session::run(const std::map<std::string, Tensor>& feeds) {
  Impl& p = *impl_;
  const memory::Executable& exe = p.exe;
  runtime::MemoryRecorder::Scope recording(p.recorder.get());
  std::map<std::string, Tensor> out;
  {
    runtime::Env env;
    const Bindings dims = p.feed(*this, env, feeds, false);
    p.execute(0, exe.plan.steps().size(), env, p.next_seed(), dims);
    for (const ir::Value* v : exe.graph->outputs) out[v->name] = env.at(v);
  }
  p.end_of_step();
  return out;
}

void Session::Impl::end_of_step() {
  if (!options.keep_cache) alloc->trim_when_idle(options.release_cache_after);
}

std::pair<std::map<std::string, Tensor>, std::unique_ptr<RunState>> Session::run_forward(
    const std::map<std::string, Tensor>& feeds, std::optional<uint64_t> seed) {
  Impl& p = *impl_;
  const memory::Executable& exe = p.exe;
  if (!exe.training) throw Error("run_forward needs a session built for training");
  runtime::MemoryRecorder::Scope recording(p.recorder.get());
  auto state = std::make_unique<RunState>(std::make_unique<RunState::Impl>());
  RunState::Impl& st = state->impl();
  st.seed = seed ? *seed : p.next_seed();
  st.dims = p.feed(*this, st.env, feeds, true);
  p.execute(0, exe.boundary, st.env, st.seed, st.dims);
  std::map<std::string, Tensor> out;
  for (const ir::Value* v : exe.forward_outputs) {
    out[v->name] = st.env.at(v);
    bool read_in_backward = false;
    for (const ir::Node* c : v->consumers) read_in_backward = read_in_backward || c->backward;
    if (!read_in_backward) st.env.erase(v);  // the caller holds it; the stash does not
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
  Impl& p = *impl_;
  const memory::Executable& exe = p.exe;
  RunState::Impl& st = state.impl();
  if (!exe.training) throw Error("run_backward needs a session built for training");
  if (st.consumed) throw Error("run_backward: this RunState was already used by a backward call");
  runtime::MemoryRecorder::Scope recording(p.recorder.get());
  refeed(st.env, exe.forward_inputs, refeeds);
  for (auto& [name, t] : output_grads) {
    auto it = std::find_if(exe.forward_outputs.begin(), exe.forward_outputs.end(),
                           [&name = name](auto* v) { return v->name == name; });
    if (it == exe.forward_outputs.end())
      throw InputError("output gradient for '" + name + "', which is not a model output");
    ir::Value* gin = exe.output_grads[size_t(it - exe.forward_outputs.begin())];
    if (!gin) throw InputError("output '" + name + "' does not depend on any input that needs a gradient");
    if (t.dtype() != gin->dtype)
      throw InputError("output gradient '" + name + "': dtype " + dtype_name(t.dtype()) + ", expected " +
                       dtype_name(gin->dtype));
    st.env[gin] = t;
  }
  for (size_t i = 0; i < exe.output_grads.size(); ++i) {
    const ir::Value* gin = exe.output_grads[i];
    if (gin && !st.env.count(gin) && !p.output_grad_may_be_unset(gin))
      throw InputError("output gradient for '" + exe.forward_outputs[i]->name + "' is missing");
  }
  st.consumed = true;
  std::function<void(size_t)> after_step;
  if (on_gradient)
    after_step = [&](size_t step) {
      for (size_t i : p.gradients_by_step[step]) on_gradient(exe.wrt[i], st.env.at(exe.grads[i]));
    };
  p.execute(exe.boundary, exe.plan.steps().size(), st.env, st.seed, st.dims, after_step);
  if (on_gradient)  // (gradients no backward step makes: an input's, or an output gradient's passed through)
    for (size_t i : p.gradients_by_step.back()) on_gradient(exe.wrt[i], st.env.at(exe.grads[i]));
  std::map<std::string, Tensor> grads;  // (but those applied in backward, freed already)
  for (size_t i = 0; i < exe.grads.size(); ++i)
    if (exe.handoff.empty() || exe.handoff[i] < 0) grads[exe.wrt[i]] = st.env.at(exe.grads[i]);
  st.env.clear();
  p.end_of_step();
  return grads;
}

std::vector<std::string> Session::gradient_order() const {
  const Impl& p = *impl_;
  const memory::Executable& exe = p.exe;
  std::vector<std::string> r;
  if (!exe.training) return r;
  for (const auto& at : p.gradients_by_step)
    for (size_t i : at) r.push_back(exe.wrt[i]);
  return r;
}

}  // namespace onnxtrain
