// Executable: a compiled graph as data. runtime::compile_training makes it (passes, autodiff, recompute plans,
// schedule, allocation plan), the executor runs its plan, memory::predict reads it, reports print it; nothing in
// it calls back. It lives in memory (not runtime) because memory predicts from it and may not know runtime.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "memory/allocation_plan.h"
#include "memory/recompute.h"

namespace onnxtrain::memory {

struct Executable {
  std::unique_ptr<ir::Graph> graph;
  std::vector<const ir::Node*> schedule;  // the execution order
  size_t boundary = 0;                    // schedule[0, boundary) is the forward part
  AllocationPlan plan;                    // for `schedule`
  RecomputeReport report;                 // training: every recompute cluster and what was applied

  std::vector<ir::Value*> forward_inputs, forward_outputs;  // what a forward call takes and returns

  // Training only.
  bool training = false;
  std::vector<ir::Value*> output_grads;  // per forward output: its gradient input, or nullptr
  std::vector<ir::Value*> grads;         // per `wrt` entry: its gradient
  std::vector<std::string> wrt;
  std::vector<bool> reached;          // per `wrt` entry: whether the loss depends on it
  // Forward outputs holding updated running statistics: {output: the input it replaces after the step}.
  std::map<std::string, std::string> buffer_updates;
  // Per `wrt` entry: the step after which an optimizer applies its gradient in backward, which is then freed
  // (memory/gradient_handoff.h); -1 where it is returned at the end of backward.
  std::vector<int> handoff;
  double optimizer_state_factor = 0;  // optimizer state bytes per parameter byte, for predictions
  // The same step compiled without recompute plans, for "before and after" predictions.
  std::unique_ptr<Executable> without_plans;
};

}  // namespace onnxtrain::memory
