// GELU fusion: the erf form exporters emit, x * 0.5 * (1 + erf(x / sqrt(2))) in
// any order of its products, becomes one Gelu node: one kernel, and one stashed
// activation instead of four for training. In bfloat16 the Gelu computes in float
// and rounds once, as PyTorch's gelu does, where the chain rounded at every step.
#include <cmath>

#include "ops/op.h"
#include "passes/pass.h"

namespace onnxtrain::passes {
namespace {

// A scalar constant equal to `want` as its dtype holds it (bf16 autocast graphs carry sqrt(2) as 1.4140625).
bool is_scalar(const ir::Value* v, double want) {
  if (!v || !v->initializer || v->initializer->numel() != 1) return false;
  DType t = v->initializer->dtype();
  double tol = t == DType::kBFloat16 ? 0x1p-8 : t == DType::kFloat16 ? 0x1p-11 : 1e-4;
  return std::abs(v->initializer->to_double()[0] - want) < tol * std::abs(want);
}

const ir::Node* single_reader(const ir::Value* v) { return v && v->consumers.size() == 1 ? v->consumers[0] : nullptr; }

class GeluFusion : public Pass {
 public:
  std::string name() const override { return "gelu_fusion"; }
  bool apply(ir::Graph& g) const override {
    std::vector<const ir::Node*> gone;
    for (auto& n : g.nodes()) {
      if (n->op_type != "Erf") continue;
      // erf's input: x / sqrt(2) or x * (1 / sqrt(2))
      const ir::Node* scale = n->input(0) ? n->input(0)->producer : nullptr;
      if (!scale || scale->outputs[0]->consumers.size() != 1) continue;
      ir::Value* x = nullptr;
      if (scale->op_type == "Div" && is_scalar(scale->input(1), std::sqrt(2.0))) x = scale->input(0);
      if (scale->op_type == "Mul" && is_scalar(scale->input(1), 1 / std::sqrt(2.0))) x = scale->input(0);
      if (!x) continue;
      const ir::Node* add = single_reader(n->outputs[0]);  // 1 + erf(...)
      if (!add || add->op_type != "Add" || !is_scalar(other_input(add, n->outputs[0]), 1.0)) continue;
      // Then two products with x and 0.5, in either order.
      const ir::Node* m1 = single_reader(add->outputs[0]);
      if (!m1 || m1->op_type != "Mul") continue;
      ir::Value* f1 = other_input(m1, add->outputs[0]);
      const ir::Node* m2 = nullptr;
      if (f1 == x || is_scalar(f1, 0.5))
        m2 = single_reader(m1->outputs[0]);
      else if (f1 && f1->producer && f1->producer->op_type == "Mul" && other_input(f1->producer, x) &&
               is_scalar(other_input(f1->producer, x), 0.5) && f1->consumers.size() == 1)
        m2 = m1;  // (x * 0.5) * (1 + erf)
      if (!m2 || m2->op_type != "Mul") continue;
      if (m2 != m1) {
        ir::Value* f2 = other_input(m2, m1->outputs[0]);
        bool ok = (f1 == x && is_scalar(f2, 0.5)) || (is_scalar(f1, 0.5) && f2 == x);
        if (!ok) continue;
      }
      ir::Value* out = m2->outputs[0];
      std::vector<const ir::Node*> chain = {scale, n.get(), add, m1};
      if (m2 != m1)
        chain.push_back(m2);
      else
        chain.push_back(f1->producer);
      // The Gelu node takes over the chain's output value, name and readers included.
      add_fused(g, "", 20, "Gelu", {x}, {out}, g.unique_name("Gelu_fused"), m2->backward);
      gone.insert(gone.end(), chain.begin(), chain.end());
    }
    return remove_all(g, gone, true);
  }
};

}  // namespace

std::unique_ptr<Pass> gelu_fusion() { return std::make_unique<GeluFusion>(); }

}  // namespace onnxtrain::passes
