// Shape inference of a graph: each node's dtypes and symbolic shapes from its op's shape function
// (ops::infer_symbolic), and the elements of small integer values (shape arithmetic) computed outright by
// running their nodes on the host when every input is known. It lives with the kernels because of the latter.
#pragma once
#include "ir/graph.h"

namespace onnxtrain::kernels {

// Infers one node's output dtypes, shapes and small values from its inputs.
void infer_node(ir::Graph& g, ir::Node& n);
// Infers every value's dtype, symbolic shape and small integer values, in node order.
void infer_shapes(ir::Graph& g);

}  // namespace onnxtrain::kernels
