#include "onnxtrain/session.h"

#include "ir/onnx_io.h"
#include "ops/bind.h"
#include "runtime/executor.h"

namespace onnxtrain {

static std::vector<const ir::Node*> model_order(const ir::Graph& g) {
  std::vector<const ir::Node*> order;
  for (auto& n : g.nodes()) order.push_back(n.get());
  return order;
}

Session::Session(std::unique_ptr<ir::Graph> graph, SessionOptions options)
    : graph_(std::move(graph)), options_(options), alloc_(options.allocator ? options.allocator : &CachingAllocator::global()) {
  ops::bind_graph(*graph_);
  ops::infer_shapes(*graph_);
  plan_ = memory::AllocationPlan::build(*graph_, model_order(*graph_), options_.allow_inplace);
}

Session Session::load(const std::string& path, SessionOptions options) {
  return Session(ir::load_model_file(path), options);
}

Session Session::from_bytes(const std::string& bytes, SessionOptions options) {
  return Session(ir::load_model_bytes(bytes), options);
}

void Session::set_profiling(bool on) { profile_ = on ? std::make_unique<runtime::Profile>() : nullptr; }

std::vector<std::string> Session::input_names() const {
  std::vector<std::string> r;
  for (auto* v : graph_->inputs) r.push_back(v->name);
  return r;
}

std::vector<std::string> Session::output_names() const {
  std::vector<std::string> r;
  for (auto* v : graph_->outputs) r.push_back(v->name);
  return r;
}

Bindings Session::bind_inputs(const std::map<std::string, std::vector<int64_t>>& dims,
                              const std::map<std::string, DType>& dtypes) const {
  for (auto& [name, d] : dims) {
    bool known = false;
    for (auto* v : graph_->inputs) known = known || v->name == name;
    if (!known) {
      std::string names;
      for (auto* v : graph_->inputs) names += (names.empty() ? "" : ", ") + v->name;
      throw InputError("input '" + name + "' is not an input of the model (inputs: " + names + ")");
    }
  }
  Bindings b;
  for (const ir::Value* v : graph_->inputs) {
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

std::map<std::string, Tensor> Session::run(const std::map<std::string, Tensor>& feeds) {
  std::map<std::string, std::vector<int64_t>> dims;
  std::map<std::string, DType> dtypes;
  for (auto& [k, t] : feeds) {
    dims[k] = t.dims();
    dtypes[k] = t.dtype();
  }
  bind_inputs(dims, dtypes);
  runtime::Env env;
  for (const ir::Value* v : graph_->inputs) env[v] = feeds.at(v->name);
  for (const ir::Value* v : graph_->initializers) env[v] = *v->initializer;
  runtime::execute(plan_, 0, plan_.steps().size(), env, alloc_, options_.seed + 0x5851F42D4C957F2Dull * run_count_++,
                   profile_.get());
  std::map<std::string, Tensor> out;
  for (const ir::Value* v : graph_->outputs) out[v->name] = env.at(v);
  return out;
}

}  // namespace onnxtrain
