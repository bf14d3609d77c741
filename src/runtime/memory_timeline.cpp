// A training step's memory over its execution order, by category: predicted
// from the allocation plan, or measured by recording the allocator.
#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "onnxtrain/session.h"

namespace onnxtrain {

// A value's own category: gradient, stash, recompute or transient.
static const char* own_category(const ir::Value* v, const std::set<std::string>& grads) {
  if (grads.count(v->name)) return "gradient";
  if (v->producer && !v->producer->backward)
    for (const ir::Node* c : v->consumers)
      if (c->backward) return "stash";
  if (v->producer && v->producer->backward && v->producer->name.find("_recompute") != std::string::npos)
    return "recompute";
  return "transient";
}

// Each buffer's category: that of the values sharing it (views and in-place outputs of its root), the first
// of stash, gradient, recompute, transient; a buffer a stashed view keeps alive is stash.
static std::map<const ir::Value*, std::string> buffer_categories(const ir::Graph& g, const memory::AllocationPlan& plan,
                                                                 const std::set<std::string>& grads) {
  static const char* order[] = {"stash", "gradient", "recompute", "transient"};
  auto rank = [&](const std::string& c) {
    return size_t(std::find(std::begin(order), std::end(order), c) - std::begin(order));
  };
  std::map<const ir::Value*, std::string> r;
  for (auto& n : g.nodes())
    for (const ir::Value* v : n->outputs) {
      if (!v || !plan.has(v) || plan.value(v).kind == memory::AllocKind::kExternal) continue;
      const ir::Value* root = plan.value(v).root ? plan.value(v).root : v;
      std::string c = own_category(v, grads);
      auto it = r.find(root);
      if (it == r.end() || rank(c) < rank(it->second)) r[root] = c;
    }
  return r;
}

// One row per plan step with the bytes live by category at the step's peak.
static nlohmann::json rows(const memory::AllocationPlan& plan,
                           const std::vector<std::map<std::string, int64_t>>& live) {
  nlohmann::json steps = nlohmann::json::array();
  for (size_t s = 0; s < plan.steps().size(); ++s) {
    const ir::Node* n = plan.steps()[s].node;
    steps.push_back({{"step", s},
                     {"node", n->name},
                     {"op", n->op_type},
                     {"part", n->backward ? "backward" : "forward"},
                     {"live", live[s]}});
  }
  return steps;
}

std::set<std::string> Session::grad_value_names() const {
  std::set<std::string> r;
  for (const ir::Value* v : grads_) r.insert(v->name);
  return r;
}

std::vector<std::map<std::string, int64_t>> Session::predicted_live(bool without_plans, const Bindings& dims) const {
  const ir::Graph& g = without_plans ? *unplanned_graph_ : *graph_;
  const memory::AllocationPlan& plan = without_plans ? unplanned_plan_ : plan_;
  auto category = buffer_categories(g, plan, grad_value_names());
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

std::string Session::memory_timeline(const Bindings& dims) const {
  MemoryPrediction p = predict_memory(dims);
  return nlohmann::json{{"source", "predicted"},
                        {"steps", rows(plan_, predicted_live(false, dims))},
                        {"parameters", p.parameters},
                        {"predicted_peak", p.peak},
                        {"boundary", boundary_}}
      .dump();
}

void Session::start_memory_recording() {
  recorder_.reset();  // one observer at a time
  recorder_ = std::make_unique<runtime::MemoryRecorder>(*alloc_);
}

std::string Session::stop_memory_recording(const Bindings& dims) {
  if (!recorder_) throw Error("stop_memory_recording: recording was not started");
  std::unique_ptr<runtime::MemoryRecorder> rec = std::move(recorder_);
  auto buffers = buffer_categories(*graph_, plan_, grad_value_names());
  auto category = [&](const ir::Value* v) -> std::string {  // unlabeled blocks are kernel scratch
    if (!v) return "scratch";
    auto it = buffers.find(v);
    return it == buffers.end() ? "transient" : it->second;
  };
  const std::vector<runtime::AllocationEvent>& ev = rec->events();
  nlohmann::json events = nlohmann::json::array();
  int64_t now = 0, peak = 0;
  for (const runtime::AllocationEvent& e : ev) {
    now += e.bytes;
    peak = std::max(peak, now);
    events.push_back({{"step", e.step},
                      {"bytes", e.bytes},
                      {"value", e.value ? e.value->name : ""},
                      {"category", category(e.value)}});
  }
  // Each step's bytes by category at its highest point (events come in step order within one training step).
  std::map<std::string, int64_t> live;
  std::vector<std::map<std::string, int64_t>> at_peak(plan_.steps().size());
  size_t i = 0;
  now = 0;
  for (size_t s = 0; s < at_peak.size(); ++s) {
    at_peak[s] = live;
    int64_t best = now;
    for (; i < ev.size() && ev[i].step == s; ++i) {
      live[category(ev[i].value)] += ev[i].bytes;
      now += ev[i].bytes;
      if (now > best) best = now, at_peak[s] = live;
    }
  }
  MemoryPrediction p = predict_memory(dims);
  return nlohmann::json{{"source", "measured"},     {"steps", rows(plan_, at_peak)}, {"parameters", p.parameters},
                        {"predicted_peak", p.peak}, {"measured_peak", peak},         {"boundary", boundary_},
                        {"events", events}}
      .dump();
}

}  // namespace onnxtrain
