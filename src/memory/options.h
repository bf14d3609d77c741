// The memory optimizer's settings for one training step, and what its levels mean (the one place that says so).
#pragma once
#include <set>
#include <string>
#include <vector>

#include "core/dim.h"
#include "memory/budget.h"
#include "memory/recompute.h"

namespace onnxtrain::memory {

struct MemoryOptions {
  std::vector<ConfigEntry> config;  // recompute plans asked for by cluster (ONNX Runtime's grammar)
  // As ONNX Runtime's levels: 0 the config's plans; 1 layer-wise checkpointing (inside each transformer layer that
  // memory/layers.h finds, every plain plan: the layer recomputed in backward from its input); 2 level 1 with the
  // compromised plans too (an up-cast's narrower input stashed, not its output). At every level the casts of
  // parameters, lone up-casts and the plans costing at most a flop per byte they save are taken unless the config
  // names their cluster (memory/recompute_choice.h). Middle grounds are budgets.
  int level = 0;
  // None, a fraction of the stash to keep at most, or a size for the whole step's predicted peak (parameters,
  // optimizer state, gradients, stash, transient buffers and scratch), for the batch of `dims`.
  Budget budget;
  Bindings dims;
  double optimizer_state_factor = 0;  // optimizer state bytes per parameter byte (AdamW 2), if held by the caller
  // `wrt` entries whose gradients the caller's optimizer applies inside backward: each handed over as soon as it is
  // final and its parameter read no more, then freed
  std::set<std::string> applied_in_backward;
};

}  // namespace onnxtrain::memory
