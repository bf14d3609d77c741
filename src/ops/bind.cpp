#include "ops/bind.h"

#include <set>

#include "onnxtrain/error.h"
#include "onnxtrain/tensor.h"

namespace onnxtrain::ops {

static std::string op_label(const ir::Node& n) {
  return (n.domain.empty() ? std::string("ai.onnx") : n.domain) + "." + n.op_type + " (opset " +
         std::to_string(n.opset) + ")";
}

void bind_graph(ir::Graph& g) {
  for (auto& n : g.nodes()) bind_node(*n);
}

std::vector<std::string> unsupported_ops(const ir::Graph& g) {
  std::set<std::string> r;
  for (auto& n : g.nodes())
    if (!find_op(n->domain, n->op_type)) r.insert(op_label(*n));
  return {r.begin(), r.end()};
}

static bool infer_symbolic_reading(ir::Graph& g, ir::Node& n) {
  bool known = true;
  for (const ir::Value* v : n.inputs) known = known && (!v || (v->has_shape && v->dtype != DType::kUndefined));
  InferCtx ctx(n, symbolic_inputs(n), &g);
  try {
    if (!known) throw ShapeUnknown{"an input's shape"};
    n.op->infer(ctx);
  } catch (const ShapeUnknown&) {
    // Sizes that depend on data: the outputs get their shapes at run time, their dtypes now.
    std::vector<DType> in;
    for (const ir::Value* v : n.inputs) in.push_back(v ? v->dtype : DType::kUndefined);
    for (size_t i = 0; i < n.outputs.size(); ++i)
      if (ir::Value* v = n.outputs[i]) {
        v->has_shape = false;
        v->dtype = n.op->output_dtype(i, in);
      }
    g.note_unknown(&n);
    return false;
  }
  for (size_t i = 0; i < n.outputs.size(); ++i) {
    ir::Value* v = n.outputs[i];
    if (!v) continue;
    auto& o = ctx.outputs()[i];
    if (o.dtype == DType::kUndefined)
      throw ShapeError(n.where() + ": output " + std::to_string(i) + " was not inferred");
    v->dtype = o.dtype;
    v->shape = o.shape;
    v->has_shape = true;
    v->sym_value = o.value;
  }
  return true;
}

bool infer_symbolic(ir::Graph& g, ir::Node& n) {
  return reading_node(n, [&] { return infer_symbolic_reading(g, n); });
}

void bind_node(ir::Node& n) {
  if (n.op) return;
  const OpDef* def = find_op(n.domain, n.op_type);
  if (!def) throw UnsupportedError(n.where() + ": op " + op_label(n) + " is not supported by onnxtrain");
  n.op = def->make(n);
}

}  // namespace onnxtrain::ops
