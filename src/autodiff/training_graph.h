// build_training_graph: one graph made of the forward nodes, a boundary, and
// the backward nodes that compute gradients, built by walking the forward graph
// in reverse and calling each op's gradient rule.
#pragma once
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace onnxtrain::autodiff {

struct TrainingSpec {
  // Graph inputs or initializers that need gradients (parameters, inputs that require grad).
  std::vector<std::string> wrt;
  // A scalar loss output to differentiate; when empty, every forward output that
  // depends on `wrt` gets a gradient input ("<output>_grad") fed to the backward part.
  std::string loss;
  // Inputs holding running statistics (BatchNorm buffers) that a training step updates: runtime::compile_training
  // makes their updated values forward outputs first (passes/running_statistics.h; Executable::buffer_updates),
  // the running variance moving by the unbiased batch variance (PyTorch's) when `unbiased_running_var`.
  std::set<std::string> running_statistics = {};
  bool unbiased_running_var = false;
};

struct TrainingGraph {
  std::unique_ptr<ir::Graph> graph;
  size_t boundary = 0;                    // nodes [0, boundary) are the forward part
  std::vector<ir::Value*> forward_outputs;
  std::vector<ir::Value*> output_grads;   // per forward output: its gradient input, or nullptr
  std::vector<ir::Value*> grads;          // per `wrt` entry: the gradient (a graph output)
  std::vector<bool> reached;              // per `wrt` entry: whether the loss depends on it (else its gradient is zeros)
};

TrainingGraph build_training_graph(std::unique_ptr<ir::Graph> forward, const TrainingSpec& spec);

}  // namespace onnxtrain::autodiff
