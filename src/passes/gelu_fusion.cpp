// GELU fusion: the erf form exporters emit, x * 0.5 * (1 + erf(x / sqrt(2))), and the tanh form of GPT-2's
// gelu_new, x * 0.5 * (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), in any order of their products, become one Gelu
// node (approximate="tanh" for the second): one kernel, and one stashed activation instead of four for training. In
// bfloat16 the Gelu computes in float and rounds once, as PyTorch's gelu does, where the chain rounded at every step.
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

// Both forms end in x * 0.5 * (1 + f), the products in any order: from `add` (1 + f), the last product and the
// nodes of the tail (add's readers), or null.
const ir::Node* tail(const ir::Node* add, const ir::Value* x, std::vector<const ir::Node*>* chain) {
  const ir::Node* m1 = single_reader(add->outputs[0]);
  if (!m1 || m1->op_type != "Mul") return nullptr;
  ir::Value* f1 = other_input(m1, add->outputs[0]);
  const ir::Node* m2 = nullptr;
  if (f1 == x || is_scalar(f1, 0.5))
    m2 = single_reader(m1->outputs[0]);
  else if (f1 && f1->producer && f1->producer->op_type == "Mul" && other_input(f1->producer, x) &&
           is_scalar(other_input(f1->producer, x), 0.5) && f1->consumers.size() == 1)
    m2 = m1;  // (x * 0.5) * (1 + f)
  if (!m2 || m2->op_type != "Mul") return nullptr;
  if (m2 != m1) {
    ir::Value* f2 = other_input(m2, m1->outputs[0]);
    bool ok = (f1 == x && is_scalar(f2, 0.5)) || (is_scalar(f1, 0.5) && f2 == x);
    if (!ok) return nullptr;
  }
  chain->push_back(m1);
  chain->push_back(m2 != m1 ? m2 : f1->producer);
  return m2;
}

// The erf form: erf's input x / sqrt(2) or x * (1 / sqrt(2)); x, or null.
ir::Value* erf_input(const ir::Node* erf, std::vector<const ir::Node*>* chain) {
  const ir::Node* scale = erf->input(0) ? erf->input(0)->producer : nullptr;
  if (!scale || scale->outputs[0]->consumers.size() != 1) return nullptr;
  ir::Value* x = nullptr;
  if (scale->op_type == "Div" && is_scalar(scale->input(1), std::sqrt(2.0))) x = scale->input(0);
  if (scale->op_type == "Mul" && is_scalar(scale->input(1), 1 / std::sqrt(2.0))) x = scale->input(0);
  if (x) chain->push_back(scale);
  return x;
}

// The tanh form (GPT-2's gelu_new): tanh's input sqrt(2 / pi) * (x + 0.044715 * x^3), x^3 as Pow(x, 3); x, or null.
ir::Value* tanh_input(const ir::Node* tanh, std::vector<const ir::Node*>* chain) {
  const ir::Node* scale = tanh->input(0) ? tanh->input(0)->producer : nullptr;
  if (!scale || scale->op_type != "Mul" || scale->outputs[0]->consumers.size() != 1 || scale->inputs.size() != 2)
    return nullptr;
  const double k = std::sqrt(2 / M_PI);
  ir::Value* inner = is_scalar(scale->input(0), k) ? scale->input(1) : is_scalar(scale->input(1), k) ? scale->input(0)
                                                                                                    : nullptr;
  const ir::Node* sum = inner ? inner->producer : nullptr;
  if (!sum || sum->op_type != "Add" || inner->consumers.size() != 1 || sum->inputs.size() != 2) return nullptr;
  for (int side = 0; side < 2; ++side) {
    ir::Value *x = sum->input(size_t(side)), *cubic = sum->input(size_t(1 - side));
    const ir::Node* mul = cubic ? cubic->producer : nullptr;
    if (!mul || mul->op_type != "Mul" || cubic->consumers.size() != 1 || mul->inputs.size() != 2) continue;
    ir::Value* cube = is_scalar(mul->input(0), 0.044715) ? mul->input(1)
                      : is_scalar(mul->input(1), 0.044715) ? mul->input(0)
                                                            : nullptr;
    const ir::Node* pow = cube ? cube->producer : nullptr;
    if (!pow || pow->op_type != "Pow" || pow->input(0) != x || !is_scalar(pow->input(1), 3.0) ||
        cube->consumers.size() != 1)
      continue;
    chain->insert(chain->end(), {scale, sum, mul, pow});
    return x;
  }
  return nullptr;
}

class GeluFusion : public Pass {
 public:
  std::string name() const override { return "gelu_fusion"; }
  bool apply(ir::Graph& g) const override {
    std::vector<const ir::Node*> gone;
    for (auto& n : g.nodes()) {
      const bool erf = n->op_type == "Erf";
      if (!erf && n->op_type != "Tanh") continue;
      std::vector<const ir::Node*> chain{n.get()};
      ir::Value* x = erf ? erf_input(n.get(), &chain) : tanh_input(n.get(), &chain);
      if (!x) continue;
      const ir::Node* add = single_reader(n->outputs[0]);  // 1 + f(...)
      if (!add || add->op_type != "Add" || !is_scalar(other_input(add, n->outputs[0]), 1.0)) continue;
      chain.push_back(add);
      const ir::Node* m2 = tail(add, x, &chain);
      if (!m2) continue;
      // The Gelu node takes over the chain's output value, name and readers included.
      ir::Attributes form;
      if (!erf) form["approximate"] = std::string("tanh");
      add_fused(g, "", 20, "Gelu", {x}, {m2->outputs[0]}, g.unique_name("Gelu_fused"), m2->backward, form);
      gone.insert(gone.end(), chain.begin(), chain.end());
    }
    return remove_all(g, gone, true);
  }
};

}  // namespace

std::unique_ptr<Pass> gelu_fusion() { return std::make_unique<GeluFusion>(); }

}  // namespace onnxtrain::passes
