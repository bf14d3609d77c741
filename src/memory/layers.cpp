#include "memory/layers.h"

#include <algorithm>
#include <map>

namespace onnxtrain::memory {
namespace {

bool forward(const ir::Node* n) { return n && !n->backward; }

bool activation(const ir::Value* v) { return v && forward(v->producer); }

// A value a layer may take in: an activation, or a graph input that is not a weight.
bool streamable(const ir::Value* v) {
  return v && dtype_is_float(v->dtype) && (activation(v) || (!v->producer && !v->initializer));
}

// A product of two activations (what attention's scores are), through at most `depth` elementwise or layout
// steps (scale, mask, bias, softcap, cast, reshape).
bool reaches_product(const ir::Value* v, int depth) {
  if (!activation(v) || depth == 0) return false;
  const ir::Node* p = v->producer;
  const std::string& op = p->op_type;
  if (op == "MatMul" || op == "FusedMatMul" || op == "Einsum")
    return std::all_of(p->inputs.begin(), p->inputs.end(), [](const ir::Value* u) { return !u || activation(u); });
  static const std::set<std::string> through = {"Mul",  "Div",  "Add",     "Sub",       "Where",
                                                "Cast", "Tanh", "Reshape", "Transpose", "MaskedSoftmax"};
  if (!through.count(op)) return false;
  return std::any_of(p->inputs.begin(), p->inputs.end(), [&](const ir::Value* u) {
    return u && dtype_is_float(u->dtype) && reaches_product(u, depth - 1);
  });
}

bool is_attention(const ir::Node& n) {
  if (n.domain == "com.onnxtrain" && (n.op_type == "AttentionSoftmax" || n.op_type == "FlashAttention")) return true;
  if (n.domain.empty() && n.op_type == "Attention") return true;  // ONNX's own (opset 23)
  bool softmax =
      (n.domain.empty() && n.op_type == "Softmax") || (n.domain == "com.onnxtrain" && n.op_type == "MaskedSoftmax");
  return softmax && reaches_product(n.input(0), 6);
}

std::set<const ir::Value*> ancestors(const ir::Node& n) {
  std::set<const ir::Value*> seen;
  std::vector<const ir::Value*> todo(n.inputs.begin(), n.inputs.end());
  while (!todo.empty()) {
    const ir::Value* v = todo.back();
    todo.pop_back();
    if (!v || !seen.insert(v).second || !forward(v->producer)) continue;
    todo.insert(todo.end(), v->producer->inputs.begin(), v->producer->inputs.end());
  }
  return seen;
}

// Walks the values computed from `from` (forward nodes at or after position `start`), in one pass over the sorted
// nodes; `visit` sees each reached node with the set so far and may stop the walk by returning true.
template <typename Visit>
void descendants(const ir::Graph& g, std::vector<const ir::Value*> from, size_t start, Visit visit) {
  std::set<const ir::Value*> reached(from.begin(), from.end());
  for (size_t i = start; i < g.nodes().size(); ++i) {
    const ir::Node& n = *g.nodes()[i];
    if (!forward(&n) || std::none_of(n.inputs.begin(), n.inputs.end(), [&](auto* u) { return reached.count(u); }))
      continue;
    if (visit(n, i, reached)) break;
    for (const ir::Value* o : n.outputs)
      if (o) reached.insert(o);
  }
}

// The values node n adds where it may join a residual stream: an Add's or a Sum's inputs, or a com.onnxtrain Dropout's
// input and residual (passes/dropout_fusion.cpp: the Add it took in); none for other nodes.
std::vector<const ir::Value*> summands(const ir::Node& n) {
  if (n.domain.empty() && (n.op_type == "Add" || n.op_type == "Sum")) return {n.inputs.begin(), n.inputs.end()};
  if (n.domain == "com.onnxtrain" && n.op_type == "Dropout" && n.input(3)) return {n.input(0), n.input(3)};
  return {};
}

// The input of the layer whose attention is node `at`: the operand of the first Add downstream of the attention
// that is an ancestor of it (the residual stream it read), or null.
const ir::Value* layer_input(const ir::Graph& g, size_t at) {
  const ir::Node& a = *g.nodes()[at];
  std::set<const ir::Value*> before = ancestors(a);
  const ir::Value* found = nullptr;
  std::vector<const ir::Value*> outs(a.outputs.begin(), a.outputs.end());
  descendants(g, outs, at + 1, [&](const ir::Node& n, size_t, const std::set<const ir::Value*>& reached) {
    for (const ir::Value* u : summands(n))
      if (u && !reached.count(u) && streamable(u) && before.count(u)) found = u;
    return found != nullptr;
  });
  return found;
}

}  // namespace

Layers detect_layers(const ir::Graph& g) {
  Layers r;
  std::map<const ir::Node*, size_t> position;
  for (size_t i = 0; i < g.nodes().size(); ++i) position[g.nodes()[i].get()] = i;
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const ir::Node& n = *g.nodes()[i];
    if (!forward(&n) || !is_attention(n)) continue;
    const ir::Value* x = layer_input(g, i);
    if (x && !r.has_input(x)) r.inputs.push_back(x);
  }
  if (r.inputs.empty()) return r;
  // From the first reader of the first layer's input to the last Add of two values computed from the last's.
  size_t first = g.nodes().size(), last = 0;
  for (const ir::Node* c : r.inputs.front()->consumers)
    if (forward(c)) first = std::min(first, position.at(c));
  const ir::Value* x = r.inputs.back();
  descendants(g, {x}, x->producer ? position.at(x->producer) + 1 : 0,
              [&](const ir::Node& n, size_t i, const std::set<const ir::Value*>& reached) {
                const std::vector<const ir::Value*> s = summands(n);
                if (s.size() >= 2 && std::all_of(s.begin(), s.end(), [&](auto* u) { return reached.count(u); }))
                  last = i;
                return false;
              });
  for (size_t i = first; i <= last && i < g.nodes().size(); ++i)
    if (forward(g.nodes()[i].get())) r.nodes.insert(g.nodes()[i].get());
  return r;
}

}  // namespace onnxtrain::memory
