// build_training_graph: one graph made of the forward nodes, a boundary, and
// the backward nodes that compute gradients, built by walking the forward graph
// in reverse and calling each op's gradient rule.
#pragma once
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "onnxtrain/training_spec.h"

namespace onnxtrain::autodiff {

struct TrainingGraph {
  std::unique_ptr<ir::Graph> graph;
  size_t boundary = 0;                    // nodes [0, boundary) are the forward part
  std::vector<ir::Value*> forward_outputs;
  std::vector<ir::Value*> output_grads;   // per forward output: its gradient input, or nullptr
  std::vector<ir::Value*> grads;          // per `wrt` entry: the gradient (a graph output)
  // per `wrt` entry: whether the loss depends on it (else its gradient is zeros)
  std::vector<bool> reached;
};

TrainingGraph build_training_graph(std::unique_ptr<ir::Graph> forward, const TrainingSpec& spec);

}  // namespace onnxtrain::autodiff
