#include "memory/predict.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "core/allocator.h"
#include "onnxtrain/error.h"

namespace onnxtrain::memory {

static int64_t evaluated_bytes(const ir::Value* v, const Bindings& dims) {
  Dim b = v->bytes();
  auto x = b.eval(dims);
  if (!x)
    throw ConfigError("memory prediction: the size of '" + v->name + "' (" + b.str() +
                      ") needs dims that were not given");
  return *x;
}

MemoryPrediction predict(const Executable& e, const Bindings& dims) {
  if (!e.training) throw Error("memory prediction needs a graph compiled for training");
  const ir::Graph& g = *e.graph;
  MemoryPrediction p;
  for (auto& name : e.wrt) p.parameters += evaluated_bytes(g.find(name), dims);
  p.optimizer_state = int64_t(double(p.parameters) * e.optimizer_state_factor);
  for (const ir::Value* v : e.grads) p.gradients += evaluated_bytes(v, dims);
  for (const ir::Value* v : stashed_values(g)) p.stash += evaluated_bytes(v, dims);
  // The plan's walk by category: its highest point is the peak (the allocator's, exactly).
  p.peak = -1;
  for (auto& live : live_by_category(e, dims)) {
    int64_t total = 0;
    for (auto& [category, bytes] : live) total += bytes;
    if (total > p.peak) p.peak = total, p.at_peak = live;
  }
  p.peak = std::max<int64_t>(p.peak, 0);
  return p;
}

// A value's own category: gradient, stash, recompute or transient.
static const char* own_category(const ir::Value* v, const std::set<const ir::Value*>& grads) {
  if (grads.count(v)) return "gradient";
  if (v->producer && !v->producer->backward)
    for (const ir::Node* c : v->consumers)
      if (c->backward) return "stash";
  if (v->producer && v->producer->backward && v->producer->name.find("_recompute") != std::string::npos)
    return "recompute";
  return "transient";
}

// A buffer a stashed view keeps alive is stash.
std::map<const ir::Value*, std::string> buffer_categories(const Executable& e) {
  static const char* order[] = {"stash", "gradient", "recompute", "transient"};
  auto rank = [&](const std::string& c) {
    return size_t(std::find(std::begin(order), std::end(order), c) - std::begin(order));
  };
  std::set<const ir::Value*> grads(e.grads.begin(), e.grads.end());
  std::map<const ir::Value*, std::string> r;
  for (auto& n : e.graph->nodes())
    for (const ir::Value* v : n->outputs) {
      if (!v || !e.plan.has(v) || e.plan.value(v).kind == AllocKind::kExternal) continue;
      const ir::Value* root = e.plan.value(v).root ? e.plan.value(v).root : v;
      std::string c = own_category(v, grads);
      auto it = r.find(root);
      if (it == r.end() || rank(c) < rank(it->second)) r[root] = c;
    }
  return r;
}

std::vector<std::map<std::string, int64_t>> live_by_category(const Executable& e, const Bindings& dims) {
  const AllocationPlan& plan = e.plan;
  auto category = buffer_categories(e);
  std::map<std::string, int64_t> live;
  std::map<const ir::Value*, std::pair<std::string, int64_t>> held;
  std::vector<std::map<std::string, int64_t>> at_peak;
  for (size_t s = 0; s < plan.steps().size(); ++s) {
    for (const ir::Value* v : plan.allocations(s)) {
      auto b = plan.value(v).bytes.eval(dims);
      if (!b) throw ConfigError("memory prediction: the size of '" + v->name + "' needs dims that were not given");
      int64_t rounded = int64_t(CachingAllocator::round_size(size_t(*b == 0 ? 1 : *b)));
      held[v] = {category.count(v) ? category.at(v) : "transient", rounded};
      live[held[v].first] += rounded;
    }
    auto scratch = plan.scratch(s).eval(dims);
    if (!scratch)
      throw ConfigError("memory prediction: the scratch of step " + std::to_string(s) +
                        " needs dims that were not given");
    at_peak.push_back(live);  // frees come at the step's end; the kernel's scratch lives within the step
    if (*scratch) at_peak.back()["scratch"] += int64_t(CachingAllocator::round_size(size_t(*scratch)));
    for (const ir::Value* v : plan.steps()[s].frees) {
      auto it = held.find(v);
      if (it != held.end()) live[it->second.first] -= it->second.second;
    }
  }
  return at_peak;
}

int64_t largest_fitting(const Executable& e, const std::string& symbol, Bindings dims, int64_t limit) {
  auto fits = [&](int64_t v) {
    dims[symbol] = v;
    return predict(e, dims).total() <= limit;
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

// Calls of custom autograd Functions (com.onnxtrain.PythonOp): what each keeps for backward lives in PyTorch.
static int64_t outside_the_plan(const Executable& e) {
  int64_t n = 0;
  for (const ir::Node* node : e.schedule) n += node->op_type == "PythonOp" && node->domain == "com.onnxtrain";
  return n;
}

std::string report_text(const Executable& e, const Bindings& dims, bool as_json) {
  std::optional<MemoryPrediction> before, after;
  try {
    before = predict(e.without_plans ? *e.without_plans : e, dims);
    after = predict(e, dims);
  } catch (const ConfigError&) {  // dims not given: the report stays symbolic
  }
  if (as_json) {
    nlohmann::json j = nlohmann::json::parse(e.report.json(dims));
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
    j["custom_function_calls_outside_the_plan"] = outside_the_plan(e);
    return j.dump(2);
  }
  std::string r = e.report.str(dims);
  if (before) r += "predicted without plans: " + before->str() + "\npredicted with plans:    " + after->str() + "\n";
  if (int64_t calls = outside_the_plan(e))
    r += "outside the plan: " + std::to_string(calls) + " call(s) of custom autograd Functions keep copies of their "
         "inputs and what they save for backward in PyTorch's memory\n";
  return r;
}

}  // namespace onnxtrain::memory

namespace onnxtrain {

std::string MemoryPrediction::str() const {
  using memory::mib;
  auto part = [&](const char* c) { return at_peak.count(c) ? at_peak.at(c) : int64_t(0); };
  return "step peak " + mib(total()) + " = parameters " + mib(parameters) + " + optimizer state " +
         mib(optimizer_state) + " + " + mib(peak) + " during the step (at its highest: stash " + mib(part("stash")) +
         ", gradients " + mib(part("gradient")) + ", recomputed " + mib(part("recompute")) + ", transient " +
         mib(part("transient")) + (part("scratch") ? ", kernel scratch " + mib(part("scratch")) : std::string()) +
         "; the whole stash " + mib(stash) + ")";
}

}  // namespace onnxtrain
