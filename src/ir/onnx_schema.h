// What ONNX's operator schemas promise that shape functions and kernels rely on, checked on a graph's nodes of
// the ONNX domains: how many inputs and outputs a node has, and one dtype for the inputs of one type constraint
// (a LayerNormalization whose bias is bool was read as float past its end). The schemas are the linked onnx
// library's: counts are checked up to the newest opset it knows (Debian's is older than the models it may be
// given; past it, each shape function and kernel checks what it reads), type constraints with the newest schema
// it has for the node's opset.
#pragma once
#include "ir/graph.h"

namespace onnxtrain::ir {

// A ModelError naming the node when it has fewer or more inputs or outputs than its op takes.
void check_arity(const Node& n);
// A ModelError naming the node and the inputs when inputs of one type constraint differ in dtype.
void check_input_types(const Node& n);

}  // namespace onnxtrain::ir
