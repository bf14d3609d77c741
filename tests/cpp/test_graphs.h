// Graphs built in code for the C++ tests.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace onnxtrain::test_graphs {

// A graph input of the given dtype and shape.
ir::Value* add_input(ir::Graph& g, const std::string& name, DType t, Shape shape);
// An initializer filled with 0.01 * (i % 17) - 0.08.
ir::Value* add_weight(ir::Graph& g, const std::string& name, std::vector<int64_t> dims);
// A float32 scalar initializer.
ir::Value* add_scalar(ir::Graph& g, const std::string& name, float value);
// A node with one fresh output; returns the output.
ir::Value* add_op(ir::Graph& g, const std::string& op, std::vector<ir::Value*> inputs, ir::Attributes attrs = {});
// y = x Reshape(w (32), (8, 4)), x (batch, 8): a gradient of x reads w through a view.
std::unique_ptr<ir::Graph> viewed_weight_graph();
// x (batch, 8) -> MatMul W1 (8, 32) -> Add b1 -> Relu -> MatMul W2 (32, 4) -> Softmax.
std::unique_ptr<ir::Graph> mlp_graph();
// loss = mean((relu(x W1 + b1) W2 - t)^2), x (batch, 8), t (batch, 4), the parameters w1, b1 and w2 graph inputs
// as onnxtrain.Module passes them.
std::unique_ptr<ir::Graph> mlp_with_loss();
// mlp_with_loss() as a model file holds it (its parameters w1, b1, w2 initializers), serialized.
std::string mlp_model_bytes();
// One com.onnxtrain node `op` run on `inputs` (graph inputs of their dtypes and shapes) with the outputs `wanted`
// marks (the others omitted), an undefined input omitted too: its output slots.
std::vector<Tensor> run_onnxtrain_node(const std::string& op, const std::vector<Tensor>& inputs,
                                       const std::vector<bool>& wanted, ir::Attributes attrs = {});
// A float tensor filled with a deterministic pattern.
Tensor pattern_tensor(std::vector<int64_t> dims);

}  // namespace onnxtrain::test_graphs
