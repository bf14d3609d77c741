// Binds every node of a graph to its op and infers dtypes and symbolic shapes.
#pragma once
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ops/op.h"

namespace onnxtrain::ops {

// Throws UnsupportedError (op, domain, opset, node) for an op not in the table.
void bind_graph(ir::Graph& g);
void bind_node(ir::Node& n);
// Infers one node's output dtypes, shapes and small values from its inputs.
void infer_node(ir::Graph& g, ir::Node& n);
// Infers every value's dtype, symbolic shape and small integer values, in node order.
void infer_shapes(ir::Graph& g);
// Ops of the graph not in the op table, as "domain.Op (opset N)".
std::vector<std::string> unsupported_ops(const ir::Graph& g);

// The shape-function view of a node's inputs at run time.
std::vector<InputInfo> runtime_inputs(const std::vector<const Tensor*>& tensors);

}  // namespace onnxtrain::ops
