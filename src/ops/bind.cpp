#include "ops/bind.h"

#include <set>

#include "core/tensor.h"

#include "onnxtrain/error.h"

namespace onnxtrain::ops {

static std::string op_label(const ir::Node& n) {
  return (n.domain.empty() ? std::string("ai.onnx") : n.domain) + "." + n.op_type + " (opset " + std::to_string(n.opset) + ")";
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

static InputInfo info_of(const ir::Value* v) {
  InputInfo in;
  if (!v) return in;
  in.present = true;
  in.dtype = v->dtype;
  in.shape = v->shape;
  if (v->initializer) in.tensor = &*v->initializer;
  in.value = v->sym_value;
  return in;
}

// The data of a value whose elements are all known constants (an initializer, or a
// small integer tensor shape inference computed), else nothing.
static std::optional<Tensor> known_data(const ir::Value* v) {
  if (v->initializer) return *v->initializer;
  if (!v->has_shape || !v->sym_value || (v->dtype != DType::kInt64 && v->dtype != DType::kInt32 && v->dtype != DType::kBool))
    return std::nullopt;
  std::vector<int64_t> dims;
  for (auto& d : v->shape) {
    if (!d.is_const()) return std::nullopt;
    dims.push_back(d.value());
  }
  if (int64_t(v->sym_value->size()) != numel_of(dims)) return std::nullopt;
  Tensor t(v->dtype, dims);
  for (size_t i = 0; i < v->sym_value->size(); ++i) {
    const Dim& d = (*v->sym_value)[i];
    if (!d.is_const()) return std::nullopt;
    if (v->dtype == DType::kInt64) t.data<int64_t>()[i] = d.value();
    else if (v->dtype == DType::kInt32) t.data<int32_t>()[i] = int32_t(d.value());
    else t.data<bool>()[i] = d.value() != 0;
  }
  return t;
}

// Small integer outputs of nodes whose inputs are all known are computed outright, so that
// shape arithmetic of any form (reversed pads, transposed shape tables) stays exact.
static void propagate_known_values(ir::Node& n) {
  if (n.op->is_random()) return;
  for (const ir::Value* v : n.outputs)
    if (v && (v->sym_value || !v->has_shape || (v->dtype != DType::kInt64 && v->dtype != DType::kInt32 && v->dtype != DType::kBool)))
      return;
  std::vector<Tensor> data;
  for (const ir::Value* v : n.inputs) {
    if (!v) {
      data.emplace_back();
      continue;
    }
    auto t = known_data(v);
    if (!t || t->numel() > 4096) return;
    data.push_back(*t);
  }
  std::vector<const Tensor*> ins;
  for (auto& t : data) ins.push_back(t.defined() ? &t : nullptr);
  InferCtx ctx(n, runtime_inputs(ins), nullptr);
  try {
    n.op->infer(ctx);
    std::vector<Tensor> outs(n.outputs.size());
    std::vector<Tensor*> ptrs(n.outputs.size(), nullptr);
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      if (!n.outputs[i]) continue;
      std::vector<int64_t> dims;
      for (auto& d : ctx.outputs()[i].shape) dims.push_back(d.value());
      outs[i] = n.op->is_view() ? Tensor(ctx.outputs()[i].dtype, dims, ins[0]->storage()) : Tensor(ctx.outputs()[i].dtype, dims);
      ptrs[i] = &outs[i];
    }
    if (!n.op->is_view()) {
      ComputeCtx c{n, ins, ptrs, 0, nullptr, &ctx};
      n.op->compute(c);
    }
    for (size_t i = 0; i < n.outputs.size(); ++i)
      if (n.outputs[i]) {
        auto v = outs[i].to_int64();
        n.outputs[i]->sym_value = std::vector<Dim>(v.begin(), v.end());
      }
  } catch (const Error&) {
    // Not computable ahead of a run (bad data is reported when the node runs).
  }
}

void infer_node(ir::Graph& g, ir::Node& n) {
  std::vector<InputInfo> ins;
  bool known = true;
  for (const ir::Value* v : n.inputs) {
    known = known && (!v || (v->has_shape && v->dtype != DType::kUndefined));
    ins.push_back(info_of(v));
  }
  InferCtx ctx(n, std::move(ins), &g);
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
    return;
  }
  for (size_t i = 0; i < n.outputs.size(); ++i) {
    ir::Value* v = n.outputs[i];
    if (!v) continue;
    auto& o = ctx.outputs()[i];
    if (o.dtype == DType::kUndefined) throw ShapeError(n.where() + ": output " + std::to_string(i) + " was not inferred");
    v->dtype = o.dtype;
    v->shape = o.shape;
    v->has_shape = true;
    v->sym_value = o.value;
  }
  propagate_known_values(n);
}

void infer_shapes(ir::Graph& g) {
  for (ir::Value* v : g.initializers) {
    if ((v->dtype == DType::kInt64 || v->dtype == DType::kInt32) && v->initializer->numel() <= 4096) {
      auto iv = v->initializer->to_int64();
      v->sym_value = std::vector<Dim>(iv.begin(), iv.end());
    }
  }
  for (auto& n : g.nodes()) infer_node(g, *n);
}

void bind_node(ir::Node& n) {
  if (n.op) return;
  const OpDef* def = find_op(n.domain, n.op_type);
  if (!def) throw UnsupportedError(n.where() + ": op " + op_label(n) + " is not supported by onnxtrain");
  n.op = def->make(n);
}

std::vector<InputInfo> runtime_inputs(const std::vector<const Tensor*>& tensors) {
  std::vector<InputInfo> r(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i]) continue;
    r[i].present = true;
    r[i].dtype = tensors[i]->dtype();
    r[i].shape = const_shape(tensors[i]->dims());
    r[i].tensor = tensors[i];
  }
  return r;
}

}  // namespace onnxtrain::ops
