// Planning a compiled step: the memory optimizer's recompute plans (by config, level and budget; a budget on the
// step's peak met by planning candidate graphs), the schedule and the allocation plan. runtime::compile_* call it
// once the passes and autodiff are done.
#pragma once
#include "memory/executable.h"
#include "memory/options.h"
#include "onnxtrain/device.h"

namespace onnxtrain::memory {

// e's schedule and allocation plan for its graph as it is (`device`: whose kernels' scratch the plan counts).
void plan(Executable& e, const MemoryOptions& o, bool allow_inplace, Device device);
// A training step: e.without_plans planned from a copy of the graph, then the recompute plans applied to e.graph
// (e.report says which) and e planned.
void plan_training(Executable& e, const MemoryOptions& o, bool allow_inplace, Device device);

}  // namespace onnxtrain::memory
