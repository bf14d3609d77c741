#include "runtime/compile.h"

#include "kernels/shape_inference.h"
#include "memory/planning.h"
#include "ops/bind.h"
#include "passes/pass.h"
#include "passes/running_statistics.h"

namespace onnxtrain::runtime {

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
  memory::plan(e, o.memory, o.allow_inplace, o.device);
  return e;
}

memory::Executable compile_training(std::unique_ptr<ir::Graph> graph, const TrainingSpec& spec,
                                    const CompileOptions& o) {
  memory::Executable e;
  e.buffer_updates = passes::expose_running_statistics(*graph, spec.running_statistics, spec.unbiased_running_var);
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
  memory::plan_training(e, o.memory, o.allow_inplace, o.device);
  return e;
}

}  // namespace onnxtrain::runtime
