#include "kernels/shape_inference.h"

#include <optional>

#include "ir/onnx_schema.h"
#include "kernels/run_node.h"
#include "onnxtrain/error.h"
#include "ops/bind.h"

namespace onnxtrain::kernels {

// Largest small integer value computed ahead of a run.
constexpr int64_t kMaxKnownElements = 4096;

static bool small_int(DType t) { return t == DType::kInt64 || t == DType::kInt32 || t == DType::kBool; }

// The data of a value whose elements are all known constants (an initializer, or a
// small integer tensor shape inference computed), else nothing.
static std::optional<Tensor> known_data(const ir::Value* v) {
  if (v->initializer) return *v->initializer;
  if (!v->has_shape || !v->sym_value || !small_int(v->dtype)) return std::nullopt;
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
    if (v->dtype == DType::kInt64)
      t.data<int64_t>()[i] = d.value();
    else if (v->dtype == DType::kInt32)
      t.data<int32_t>()[i] = int32_t(d.value());
    else
      t.data<bool>()[i] = d.value() != 0;
  }
  return t;
}

// Small integer outputs of nodes whose inputs are all known are computed outright, so that
// shape arithmetic of any form (reversed pads, transposed shape tables) stays exact.
static void propagate_known_values(ir::Node& n) {
  if (n.op->is_random()) return;
  for (const ir::Value* v : n.outputs)
    if (v && (v->sym_value || !v->has_shape || !small_int(v->dtype))) return;
  std::vector<Tensor> data;
  for (const ir::Value* v : n.inputs) {
    if (!v) {
      data.emplace_back();
      continue;
    }
    auto t = known_data(v);
    if (!t || t->numel() > kMaxKnownElements) return;
    data.push_back(*t);
  }
  std::vector<const Tensor*> ins;
  for (auto& t : data) ins.push_back(t.defined() ? &t : nullptr);
  try {
    std::vector<Tensor> outs = run_node(n, ins);
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
  ir::check_input_types(n);
  if (ops::infer_symbolic(g, n)) propagate_known_values(n);
}

void infer_shapes(ir::Graph& g) {
  for (ir::Value* v : g.initializers) {
    if ((v->dtype == DType::kInt64 || v->dtype == DType::kInt32) && v->initializer->numel() <= kMaxKnownElements) {
      auto iv = v->initializer->to_int64();
      v->sym_value = std::vector<Dim>(iv.begin(), iv.end());
    }
  }
  for (auto& n : g.nodes()) infer_node(g, *n);
}

}  // namespace onnxtrain::kernels
