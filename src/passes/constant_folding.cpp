// Constant folding: a node whose inputs are all constants (initializers) is run
// once and its outputs become initializers; an integer output whose elements
// shape inference knows exactly (shape arithmetic on known dims) becomes one too.
#include "kernels/run_node.h"
#include "ops/op.h"
#include "passes/pass.h"

namespace onnxtrain::passes {
namespace {

// Largest constant this pass creates: folding must not blow up the model.
constexpr int64_t kMaxFoldedBytes = 1 << 20;

Tensor tensor_of_values(const ir::Value* v) {
  std::vector<int64_t> dims;
  for (auto& d : v->shape) dims.push_back(d.value());
  Tensor t(v->dtype, dims);
  for (size_t i = 0; i < v->sym_value->size(); ++i) {
    int64_t x = (*v->sym_value)[i].value();
    if (v->dtype == DType::kInt64)
      t.data<int64_t>()[i] = x;
    else
      t.data<int32_t>()[i] = int32_t(x);
  }
  return t;
}

bool known_values(const ir::Value* v) {
  if (!v || !v->has_shape || !v->sym_value || (v->dtype != DType::kInt64 && v->dtype != DType::kInt32)) return false;
  for (auto& d : v->shape)
    if (!d.is_const()) return false;
  for (auto& d : *v->sym_value)
    if (!d.is_const()) return false;
  return int64_t(v->sym_value->size()) == shape_numel(v->shape).value();
}

class ConstantFolding : public Pass {
 public:
  std::string name() const override { return "constant_folding"; }
  bool apply(ir::Graph& g) const override {
    std::vector<const ir::Node*> folded;
    for (auto& n : g.nodes()) {
      if (!n->op || n->op->is_random() || n->outputs.empty()) continue;
      bool all_const = true;
      for (ir::Value* v : n->inputs) all_const = all_const && (!v || (v->initializer && !v->trainable));
      bool values_known = true;
      for (ir::Value* v : n->outputs) values_known = values_known && (!v || known_values(v));
      if (values_known) {
        for (ir::Value* v : n->outputs)
          if (v) make_constant(g, v, tensor_of_values(v));
        folded.push_back(n.get());
        continue;
      }
      if (!all_const || !fits(*n)) continue;
      std::vector<const Tensor*> ins;
      for (ir::Value* v : n->inputs) ins.push_back(v ? &*v->initializer : nullptr);
      std::vector<Tensor> outs = kernels::run_node(*n, ins);
      // A view shares its input's bytes; a constant owns its own.
      if (n->op->is_view()) outs[0] = outs[0].clone();
      for (size_t i = 0; i < n->outputs.size(); ++i)
        if (n->outputs[i]) make_constant(g, n->outputs[i], outs[i]);
      folded.push_back(n.get());
    }
    g.remove_nodes([&](const ir::Node& n) { return std::find(folded.begin(), folded.end(), &n) != folded.end(); });
    return !folded.empty();
  }

 private:
  static bool fits(const ir::Node& n) {
    for (const ir::Value* v : n.outputs) {
      if (!v) continue;
      if (!v->has_shape) return false;
      Dim bytes = v->bytes();
      if (!bytes.is_const() || bytes.value() > kMaxFoldedBytes) return false;
    }
    return true;
  }
  static void make_constant(ir::Graph& g, ir::Value* v, Tensor t) {
    v->initializer = std::move(t);
    v->producer = nullptr;
    g.initializers.push_back(v);
  }
};

}  // namespace

std::unique_ptr<Pass> constant_folding() { return std::make_unique<ConstantFolding>(); }

}  // namespace onnxtrain::passes
