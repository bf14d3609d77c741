#include "runtime/executor.h"

#include <chrono>

#include "ops/bind.h"
#include "ops/shape_util.h"
#include "runtime/memory_recorder.h"
#include "onnxtrain/error.h"

namespace onnxtrain::runtime {

// Random ops draw from the run's seed and a key of their own (a hash of the node's
// name), so a node and its recomputed clone (which keeps the key) draw the same numbers.
static uint64_t random_key(const ir::Node& n) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (char ch : n.random_key.empty() ? n.name : n.random_key) h = (h ^ uint8_t(ch)) * 1099511628211ull;
  return h;
}

static void run_step(const memory::AllocationPlan& plan, size_t s, Env& env, CachingAllocator* alloc, uint64_t seed,
                     MemoryRecorder* recorder) {
  const memory::StepPlan& step = plan.steps()[s];
  const ir::Node& n = *step.node;
  std::vector<const Tensor*> ins;
  for (const ir::Value* v : n.inputs) {
    if (!v) {
      ins.push_back(nullptr);
      continue;
    }
    auto it = env.find(v);
    if (it == env.end()) throw Error(n.where() + ": input '" + v->name + "' has no value (internal planning error)");
    ins.push_back(&it->second);
  }
  ops::InferCtx ctx(n, ops::runtime_inputs(ins), nullptr);
  n.op->infer(ctx);
  std::vector<Tensor> outs(n.outputs.size());
  std::vector<Tensor*> out_ptrs(n.outputs.size(), nullptr);
  for (size_t i = 0; i < n.outputs.size(); ++i) {
    const ir::Value* v = n.outputs[i];
    if (!v) continue;
    const ops::OutputInfo& o = ctx.outputs()[i];
    std::vector<int64_t> dims = ops::concrete(n, o.shape);
    const memory::ValuePlan& vp = plan.value(v);
    size_t need = size_t(numel_of(dims)) * dtype_size(o.dtype);
    if (vp.kind == memory::AllocKind::kView) {
      outs[i] = Tensor(o.dtype, dims, ins[0]->storage());
    } else if (vp.kind == memory::AllocKind::kInPlace && env.at(vp.source).nbytes() == need) {
      outs[i] = Tensor(o.dtype, dims, env.at(vp.source).storage());
    } else {
      outs[i] = Tensor(o.dtype, dims, alloc);
      if (recorder) recorder->label(outs[i].raw(), v);
    }
    out_ptrs[i] = &outs[i];
  }
  if (!n.op->is_view()) {
    ops::ComputeCtx c{n, ins, out_ptrs, seed ^ random_key(n), alloc, &ctx};
    n.op->compute(c);
  }
  for (size_t i = 0; i < n.outputs.size(); ++i)
    if (n.outputs[i]) env[n.outputs[i]] = std::move(outs[i]);
  for (const ir::Value* v : step.release) env.erase(v);
}

void execute(const memory::AllocationPlan& plan, size_t begin, size_t end, Env& env, CachingAllocator* alloc,
             uint64_t seed, Profile* profile, MemoryRecorder* recorder) {
  for (size_t s = begin; s < end; ++s) {
    try {
      auto t0 = std::chrono::steady_clock::now();
      if (recorder) recorder->at_step(s);
      run_step(plan, s, env, alloc, seed, recorder);
      if (profile) {
        const std::string& op = plan.steps()[s].node->op_type;
        profile->ms_by_op[op] += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        profile->calls_by_op[op]++;
      }
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      throw Error(plan.steps()[s].node->where() + ": " + e.what());
    }
  }
}

}  // namespace onnxtrain::runtime
