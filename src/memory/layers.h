// Transformer layers, found from the structure every family shares rather than from node names or norms: a layer
// is an attention (a softmax over the product of two activations, or a fused attention op) whose output joins a
// residual stream through an Add whose other operand is an ancestor of the attention: that operand is the
// layer's input. It holds for pre- and post-norm, LayerNorm or RMSNorm, masks built inside or outside the blocks,
// dropout anywhere, fused or unfused attention, grouped-query heads, GELU or SwiGLU MLPs and parallel residuals
// (GPT-NeoX: the MLP's output joins first, the stream after).
#pragma once
#include <algorithm>
#include <set>
#include <vector>

#include "ir/graph.h"

namespace onnxtrain::memory {

struct Layers {
  std::vector<const ir::Value*> inputs;  // each layer's input on the residual stream, in order: its checkpoint
  // The forward nodes from the first layer's input to the last layer's last residual Add.
  std::set<const ir::Node*> nodes;
  size_t count() const { return inputs.size(); }
  bool has_input(const ir::Value* v) const { return std::find(inputs.begin(), inputs.end(), v) != inputs.end(); }
};

Layers detect_layers(const ir::Graph& g);

}  // namespace onnxtrain::memory
