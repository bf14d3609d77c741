#include "runtime/executor.h"

#include <chrono>

#include "onnxtrain/error.h"
#include "runtime/memory_recorder.h"

namespace onnxtrain::runtime {

// Random ops draw from the run's seed and a key of their own (a hash of the node's
// name), so a node and its recomputed clone (which keeps the key) draw the same numbers.
static uint64_t random_key(const ir::Node& n) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (char ch : n.key()) h = (h ^ uint8_t(ch)) * 1099511628211ull;
  return h;
}

static void run_step(const memory::AllocationPlan& plan, size_t s, Env& env, const Execution& x) {
  const memory::StepPlan& step = plan.steps()[s];
  const ir::Node& n = *step.node;
  std::vector<const Tensor*> ins;
  for (const ir::Value* v : n.inputs) {
    if (!v) {
      ins.push_back(nullptr);
      continue;
    }
    auto it = env.find(v);
    if (it == env.end() && !v->producer) {  // a graph input left unset: an output gradient the caller did not make
      ins.push_back(nullptr);              // (run_backward lets only those whose readers all accept it through)
      continue;
    }
    if (it == env.end()) throw Error(n.where() + ": input '" + v->name + "' has no value (internal planning error)");
    ins.push_back(&it->second);
  }
  kernels::RunArgs args;
  args.device = x.alloc->device();
  args.alloc = x.alloc;
  args.seed = x.seed ^ random_key(n);
  args.dims = x.dims;
  args.cache = x.caches ? &x.caches[s] : nullptr;
  args.host_only = step.host_only;
  for (const ir::Value* v : n.outputs) {
    const memory::ValuePlan* vp = v ? &plan.value(v) : nullptr;
    args.reuse.push_back(vp && vp->kind == memory::AllocKind::kInPlace ? &env.at(vp->source) : nullptr);
  }
  if (x.recorder)
    args.on_new_buffer = [&](size_t i, const Tensor& t) { x.recorder->label(t.raw(), n.outputs[i], t.dims()); };
  std::vector<Tensor> outs = kernels::run_node(n, ins, args);
  for (size_t i = 0; i < n.outputs.size(); ++i)
    if (n.outputs[i]) env[n.outputs[i]] = std::move(outs[i]);
}

void execute(const memory::AllocationPlan& plan, size_t begin, size_t end, Env& env, const Execution& x) {
  for (size_t s = begin; s < end; ++s) {
    try {
      auto t0 = std::chrono::steady_clock::now();
      if (x.recorder) x.recorder->at_step(s);
      run_step(plan, s, env, x);
      if (Profile* profile = x.profile) {
        const std::string& op = plan.steps()[s].node->op_type;
        profile->ms_by_op[op] +=
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        profile->calls_by_op[op]++;
      }
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      throw Error(plan.steps()[s].node->where() + ": " + e.what());
    }
    if (x.after_step) x.after_step(s);
    for (const ir::Value* v : plan.steps()[s].release) env.erase(v);
  }
}

}  // namespace onnxtrain::runtime
