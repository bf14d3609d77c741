#include "runtime/compile.h"

#include <algorithm>
#include <sstream>

#include "kernels/shape_inference.h"
#include "memory/gradient_handoff.h"
#include "memory/predict.h"
#include "ops/bind.h"
#include "passes/pass.h"
#include "runtime/schedule.h"

namespace onnxtrain::runtime {
namespace {

bool one_element(const ir::Value& v) {
  return v.has_shape && std::all_of(v.shape.begin(), v.shape.end(), [](const Dim& d) { return d == Dim(1); });
}

// The schedule and the allocation plan of e's graph.
void plan(memory::Executable& e, const CompileOptions& o) {
  Schedule s = schedule(*e.graph);
  e.schedule = std::move(s.order);
  e.boundary = s.boundary;
  std::map<const ir::Value*, int> handed, returned;
  if (e.training) {
    e.handoff = memory::handoff_steps(*e.graph, e.schedule, e.wrt, e.grads, o.applied_in_backward);
    for (size_t i = 0; i < e.handoff.size(); ++i)
      if (e.handoff[i] >= 0) handed[e.grads[i]] = e.handoff[i];
    // The forward's outputs are the caller's once forward returns: a training loop keeps the loss it calls
    // backward on and drops the rest (a language model's logits), so the step's peak counts an output of one
    // element through the step and a larger one until forward returns.
    for (const ir::Value* v : e.forward_outputs)
      if (v && v->producer && e.boundary > 0 && !one_element(*v)) returned[v] = int(e.boundary) - 1;
  }
  e.plan = memory::AllocationPlan::build(*e.graph, e.schedule, o.allow_inplace, o.device, handed, returned);
}

// `base`'s step on another graph (a copy of base's, rewritten): its interface found there by name, and planned.
std::unique_ptr<memory::Executable> planned_like(const memory::Executable& base, std::unique_ptr<ir::Graph> g,
                                                 const CompileOptions& o) {
  auto e = std::make_unique<memory::Executable>();
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
  plan(*e, o);
  return e;
}

// A budget on the step's peak: the stash to save whose cheapest plans bring the rewritten step's predicted peak
// under it. The saves tried are a fixed ladder (k/32 of the stash, k = 0, 1, ...), the first that fits wins, and
// when none fits the lowest peak of the ladder does: so a tighter budget never gets a higher peak than a looser
// one (it takes the looser one's rung when that rung fits it too, and otherwise a rung under the tighter budget).
// Each try rewrites a copy of the graph and plans it as it will run. Returns the bytes to save; `text` says how
// the budget was met.
int64_t stash_to_save(const memory::Executable& e, memory::RecomputeOptions ro, const CompileOptions& o,
                      std::string* text) {
  constexpr int kRungs = 32;
  const int64_t limit = o.memory_budget.peak_bytes;
  bool met = true;
  int64_t saved = 0, stash = 0;
  auto peak_with = [&](int64_t need) {
    ro.save_bytes = need;
    auto h = e.graph->clone();
    memory::RecomputeReport r = memory::apply_recompute(*h, ro);
    met = r.met, saved = r.saved;
    memory::MemoryPrediction p = memory::predict(*planned_like(e, std::move(h), o), o.memory_dims);
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
  os << "budget " << o.memory_budget.str() << ": predicted peak " << memory::mib(before) << " without its plans, "
     << memory::mib(peak) << " with them (they save " << memory::mib(best_saved) << " of stash)"
     << (peak <= limit ? "" : "; missed by " + memory::mib(peak - limit));
  *text = os.str();
  return best;
}

}  // namespace

memory::Executable compile_inference(std::unique_ptr<ir::Graph> graph, const CompileOptions& o) {
  memory::Executable e;
  e.graph = std::move(graph);
  ops::bind_graph(*e.graph);
  kernels::infer_shapes(*e.graph);
  if (o.optimize) {
    passes::run_passes(*e.graph, passes::default_passes());
    // Folded constants (a Resize's scales, say) can make shapes known that were not: infer them again.
    kernels::infer_shapes(*e.graph);
  }
  e.forward_inputs = e.graph->inputs;
  e.forward_outputs = e.graph->outputs;
  plan(e, o);
  return e;
}

memory::Executable compile_training(std::unique_ptr<ir::Graph> graph, const autodiff::TrainingSpec& spec,
                                    const CompileOptions& o) {
  memory::Executable e;
  e.forward_inputs = graph->inputs;
  for (auto& name : spec.wrt)
    if (ir::Value* v = graph->find(name)) v->trainable = true;
  if (o.optimize) {  // simplify and fuse the forward graph before differentiating it
    ops::bind_graph(*graph);
    kernels::infer_shapes(*graph);
    passes::run_passes(*graph, passes::default_passes());
  }
  autodiff::TrainingGraph tg = autodiff::build_training_graph(std::move(graph), spec);
  e.graph = std::move(tg.graph);
  if (o.optimize) passes::run_passes(*e.graph, passes::default_passes());
  e.training = true;
  e.forward_outputs = tg.forward_outputs;
  e.output_grads = tg.output_grads;
  e.grads = tg.grads;
  e.reached = tg.reached;
  e.wrt = spec.wrt;
  e.optimizer_state_factor = o.optimizer_state_factor;
  // Recompute clones go in after the passes (common-subexpression elimination would merge them back).
  e.without_plans = planned_like(e, e.graph->clone(), o);
  memory::RecomputeOptions ro;
  ro.config = o.memory_config;
  ro.level = o.memory_level;
  ro.stash_fraction = o.memory_budget.stash_fraction;
  ro.dims = o.memory_dims;
  std::string budget_text;
  if (o.memory_budget.peak_bytes) ro.save_bytes = stash_to_save(e, ro, o, &budget_text);
  e.report = memory::apply_recompute(*e.graph, ro);
  if (o.memory_budget.peak_bytes) e.report.budget = budget_text;
  plan(e, o);
  return e;
}

}  // namespace onnxtrain::runtime
