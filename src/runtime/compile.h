// The one-way pipeline from a graph to an Executable: passes, autodiff, then memory/'s planning (the memory
// optimizer's recompute plans, the schedule and the allocation plan). Options come in typed and checked (parsed
// at the edge: bindings, CLI); nothing is called back.
#pragma once
#include <memory>

#include "autodiff/training_graph.h"
#include "memory/executable.h"
#include "memory/options.h"
#include "onnxtrain/device.h"

namespace onnxtrain::runtime {

struct CompileOptions {
  bool allow_inplace = true;  // let outputs reuse dying inputs' buffers
  bool optimize = true;       // run the graph passes (constant folding, CSE, dead code, fusions)
  memory::MemoryOptions memory;  // training: the memory optimizer's settings
  Device device = kCpu;          // whose kernels' scratch the plan counts
};

// Inference: the graph as it is (after the passes).
memory::Executable compile_inference(std::unique_ptr<ir::Graph> graph, const CompileOptions& options);
// Training: the forward graph, differentiated for `spec`, with the memory optimizer's plans.
memory::Executable compile_training(std::unique_ptr<ir::Graph> graph, const TrainingSpec& spec,
                                    const CompileOptions& options);

}  // namespace onnxtrain::runtime
