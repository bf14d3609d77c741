// Binds every node of a graph to its op; infers a node's dtypes and symbolic shapes.
#pragma once
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ops/op.h"

namespace onnxtrain::ops {

// Throws UnsupportedError (op, domain, opset, node) for an op not in the table.
void bind_graph(ir::Graph& g);
void bind_node(ir::Node& n);
// Infers one node's output dtypes and symbolic shapes from its inputs (small integer values too where the
// shape function computes them); false when sizes depend on data not known before a run (the outputs then
// keep their dtypes only). kernels::infer_node adds the values of small integer nodes run on the host.
bool infer_symbolic(ir::Graph& g, ir::Node& n);
// Ops of the graph not in the op table, as "domain.Op (opset N)".
std::vector<std::string> unsupported_ops(const ir::Graph& g);

}  // namespace onnxtrain::ops
