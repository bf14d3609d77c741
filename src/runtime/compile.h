// The one-way pipeline from a graph to an Executable: passes, autodiff, the memory optimizer's recompute plans
// (a budget on the step's peak searched here, by planning candidate graphs), the schedule and the allocation
// plan. Options come in typed and checked (parsed at the edge: bindings, CLI); nothing is called back.
#pragma once
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "autodiff/training_graph.h"
#include "core/device.h"
#include "memory/budget.h"
#include "memory/executable.h"
#include "memory/recompute.h"

namespace onnxtrain::runtime {

struct CompileOptions {
  bool allow_inplace = true;  // let outputs reuse dying inputs' buffers
  bool optimize = true;       // run the graph passes (constant folding, CSE, dead code, fusions)
  // Training, the memory optimizer's settings:
  std::vector<memory::ConfigEntry> memory_config;  // recompute plans asked for by cluster
  int memory_level = 0;                            // 0 config only, 1 transformer layer-wise, 2 also compromised plans
  // none, a fraction of the stash to keep at most, or a size for the whole step's predicted peak (parameters,
  // optimizer state, gradients, stash, transient buffers and scratch)
  memory::Budget memory_budget;
  Bindings memory_dims;               // the dims of the batch the budget is for
  double optimizer_state_factor = 0;  // optimizer state bytes per parameter byte (AdamW 2), if held by the caller
  // `wrt` entries whose gradients the caller's optimizer applies inside backward: each handed over as soon as it is
  // final and its parameter read no more, then freed
  std::set<std::string> applied_in_backward;
  Device device = kCpu;               // whose kernels' scratch the plan counts
};

// Inference: the graph as it is (after the passes).
memory::Executable compile_inference(std::unique_ptr<ir::Graph> graph, const CompileOptions& options);
// Training: the forward graph, differentiated for `spec`, with the memory optimizer's plans.
memory::Executable compile_training(std::unique_ptr<ir::Graph> graph, const autodiff::TrainingSpec& spec,
                                    const CompileOptions& options);

}  // namespace onnxtrain::runtime
