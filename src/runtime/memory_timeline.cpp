// A training step's memory over its execution order, by category: predicted
// from the allocation plan, or measured by recording the allocator.
#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "runtime/session_impl.h"

namespace onnxtrain {

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

std::string Session::memory_timeline(const Bindings& dims) const {
  MemoryPrediction p = predict_memory(dims);
  return nlohmann::json{{"source", "predicted"},
                        {"steps", rows(impl_->exe.plan, memory::live_by_category(impl_->exe, dims))},
                        {"parameters", p.parameters},
                        {"predicted_peak", p.peak},
                        {"boundary", impl_->exe.boundary}}
      .dump();
}

void Session::start_memory_recording() {
  impl_->recorder.reset();  // a new recording of this session
  impl_->recorder = std::make_unique<runtime::MemoryRecorder>(*impl_->alloc);
}

std::string Session::stop_memory_recording(const Bindings& dims) {
  if (!impl_->recorder) throw Error("stop_memory_recording: recording was not started");
  std::unique_ptr<runtime::MemoryRecorder> rec = std::move(impl_->recorder);
  auto buffers = memory::buffer_categories(impl_->exe);
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
  std::vector<std::map<std::string, int64_t>> at_peak(impl_->exe.plan.steps().size());
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
  // The prediction for the run's dims: the inputs', and those of symbols bound as the run met them (-1 where
  // some size still needs a symbol the run left unbound)
  Bindings run_dims = dims;
  for (auto& [symbol, value] : rec->observed()) run_dims.emplace(symbol, value);
  MemoryPrediction p;
  p.peak = -1;
  try {
    p = predict_memory(run_dims);
  } catch (const ConfigError&) {
    for (auto& name : impl_->exe.wrt)
      p.parameters += impl_->exe.graph->find(name)->bytes().eval(run_dims).value_or(0);
  }
  return nlohmann::json{{"source", "measured"},
                        {"steps", rows(impl_->exe.plan, at_peak)},
                        {"parameters", p.parameters},
                        {"predicted_peak", p.peak},
                        {"measured_peak", peak},
                        {"boundary", impl_->exe.boundary},
                        {"events", events}}
      .dump();
}

}  // namespace onnxtrain
