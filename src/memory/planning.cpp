#include "memory/planning.h"

#include <algorithm>
#include <map>
#include <sstream>

#include "memory/gradient_handoff.h"
#include "memory/predict.h"
#include "memory/schedule.h"

namespace onnxtrain::memory {
namespace {

bool one_element(const ir::Value& v) {
  return v.has_shape && std::all_of(v.shape.begin(), v.shape.end(), [](const Dim& d) { return d == Dim(1); });
}

// `base`'s step on another graph (a copy of base's, rewritten): its interface found there by name, and planned.
std::unique_ptr<Executable> planned_like(const Executable& base, std::unique_ptr<ir::Graph> g,
                                         const MemoryOptions& o, bool allow_inplace, Device device) {
  auto e = std::make_unique<Executable>();
  e->graph = std::move(g);
  auto same = [&](const std::vector<ir::Value*>& vs) {
    std::vector<ir::Value*> r;
    for (ir::Value* v : vs) r.push_back(v ? e->graph->find(v->name) : nullptr);
    return r;
  };
  e->forward_inputs = same(base.forward_inputs);
  e->forward_outputs = same(base.forward_outputs);
  e->output_grads = same(base.output_grads);
  e->grads = same(base.grads);
  e->training = base.training;
  e->wrt = base.wrt;
  e->reached = base.reached;
  e->optimizer_state_factor = base.optimizer_state_factor;
  plan(*e, o, allow_inplace, device);
  return e;
}

// A budget on the step's peak: the stash to save whose cheapest plans bring the rewritten step's predicted peak
// under it. The saves tried are a fixed ladder (k/32 of the stash, k = 0, 1, ...), the first that fits wins, and
// when none fits the lowest peak of the ladder does: so a tighter budget never gets a higher peak than a looser
// one (it takes the looser one's rung when that rung fits it too, and otherwise a rung under the tighter budget).
// Each try rewrites a copy of the graph and plans it as it will run. Returns the bytes to save; `text` says how
// the budget was met.
int64_t stash_to_save(const Executable& e, RecomputeOptions ro, const MemoryOptions& o, bool allow_inplace,
                      Device device, std::string* text) {
  constexpr int kRungs = 32;
  const int64_t limit = o.budget.peak_bytes;
  bool met = true;
  int64_t saved = 0, stash = 0;
  auto peak_with = [&](int64_t need) {
    ro.save_bytes = need;
    auto h = e.graph->clone();
    RecomputeReport r = apply_recompute(*h, ro);
    met = r.met, saved = r.saved;
    MemoryPrediction p = predict(*planned_like(e, std::move(h), o, allow_inplace, device), o.dims);
    if (!need) stash = p.stash;
    return p.total();
  };
  const int64_t before = peak_with(0);
  int64_t peak = before, best = 0, best_saved = 0;
  for (int k = 1; k <= kRungs && peak > limit; ++k) {
    const int64_t need = stash * k / kRungs, p = peak_with(need);
    if (p < peak || p <= limit) peak = p, best = need, best_saved = saved;
    if (!met) break;  // every plan taken: the rungs above would take the same
  }
  std::ostringstream os;
  os << "budget " << o.budget.str() << ": predicted peak " << mib(before) << " without its plans, " << mib(peak)
     << " with them (they save " << mib(best_saved) << " of stash)"
     << (peak <= limit ? "" : "; missed by " + mib(peak - limit));
  *text = os.str();
  return best;
}

}  // namespace

void plan(Executable& e, const MemoryOptions& o, bool allow_inplace, Device device) {
  Schedule s = schedule(*e.graph);
  e.schedule = std::move(s.order);
  e.boundary = s.boundary;
  std::map<const ir::Value*, int> handed, returned;
  if (e.training) {
    e.handoff = handoff_steps(*e.graph, e.schedule, e.wrt, e.grads, o.applied_in_backward);
    for (size_t i = 0; i < e.handoff.size(); ++i)
      if (e.handoff[i] >= 0) handed[e.grads[i]] = e.handoff[i];
    // The forward's outputs are the caller's once forward returns: a training loop keeps the loss it calls
    // backward on and drops the rest (a language model's logits), so the step's peak counts an output of one
    // element through the step and a larger one until forward returns.
    for (const ir::Value* v : e.forward_outputs)
      if (v && v->producer && e.boundary > 0 && !one_element(*v)) returned[v] = int(e.boundary) - 1;
  }
  e.plan = AllocationPlan::build(*e.graph, e.schedule, allow_inplace, device, handed, returned);
}

void plan_training(Executable& e, const MemoryOptions& o, bool allow_inplace, Device device) {
  e.optimizer_state_factor = o.optimizer_state_factor;
  // (the recompute clones go in after the passes: common-subexpression elimination would merge them back)
  e.without_plans = planned_like(e, e.graph->clone(), o, allow_inplace, device);
  RecomputeOptions ro;
  ro.config = o.config;
  ro.level = o.level;
  ro.stash_fraction = o.budget.stash_fraction;
  ro.dims = o.dims;
  std::string budget_text;
  if (o.budget.peak_bytes) ro.save_bytes = stash_to_save(e, ro, o, allow_inplace, device, &budget_text);
  e.report = apply_recompute(*e.graph, ro);
  if (o.budget.peak_bytes) e.report.budget = budget_text;
  plan(e, o, allow_inplace, device);
}

}  // namespace onnxtrain::memory
