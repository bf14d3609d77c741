// GELU fusion: the erf form exporters emit, x * 0.5 * (1 + erf(x / sqrt(2))), and the tanh form of GPT-2's
// gelu_new, x * 0.5 * (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), in any order of their products, become one Gelu
// node (approximate="tanh" for the second): one kernel, and one stashed activation instead of four for training. In
// bfloat16 the Gelu computes in float and rounds once, as PyTorch's gelu does, where the chain rounded at every step.
// A 16-bit x may reach some of the chain's nodes widened to float32 (CUDA's autocast runs Pow in float32 and
// promotes what meets its result: x + 0.044715 x^3 and the last product are float32, x * 0.5 is not): the Gelu then
// reads x widened and computes in float32, as the chain did.
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

// The value v is, seen through a widening Cast.
const ir::Value* unwidened(const ir::Value* v) {
  const ir::Node* c = widening(v);
  return c ? c->input(0) : v;
}

// A chain matched: its nodes (removed once the Gelu replaces them) and every value it reads as x (x, or x widened).
struct Match {
  std::vector<const ir::Node*> chain;
  std::vector<ir::Value*> xs;
  // Whether v is x, or x widened, and noted as one of its forms when it is.
  bool is_x(ir::Value* v) {
    if (!v || unwidened(v) != unwidened(xs.front())) return false;
    xs.push_back(v);
    return true;
  }
};

// Both forms end in x * 0.5 * (1 + f), the products in any order: from `add` (1 + f), the last product (its nodes
// added to the chain: add's readers, and a widening of x * 0.5), or null.
const ir::Node* tail(const ir::Node* add, Match& m) {
  const ir::Node* m1 = single_reader(add->outputs[0]);
  if (!m1 || m1->op_type != "Mul") return nullptr;
  ir::Value* f1 = other_input(m1, add->outputs[0]);
  if (!f1) return nullptr;
  if (m.is_x(f1) || is_scalar(f1, 0.5)) {  // x * (1 + f), then times 0.5; or 0.5 * (1 + f), then times x
    const ir::Node* m2 = single_reader(m1->outputs[0]);
    if (!m2 || m2->op_type != "Mul") return nullptr;
    ir::Value* f2 = other_input(m2, m1->outputs[0]);
    if (!(is_scalar(f1, 0.5) ? m.is_x(f2) : is_scalar(f2, 0.5))) return nullptr;
    m.chain.insert(m.chain.end(), {m1, m2});
    return m2;
  }
  // (x * 0.5) * (1 + f), x * 0.5 perhaps widened
  const ir::Node* widen = widening(f1);
  const ir::Value* half = widen ? widen->input(0) : f1;
  const ir::Node* mul = made_by(half, "Mul");
  if (!mul || mul->inputs.size() != 2 || half->consumers.size() != 1 || f1->consumers.size() != 1) return nullptr;
  ir::Value* x = is_scalar(mul->input(1), 0.5)   ? mul->input(0)
                 : is_scalar(mul->input(0), 0.5) ? mul->input(1)
                                                 : nullptr;
  if (!m.is_x(x)) return nullptr;
  m.chain.insert(m.chain.end(), {m1, mul});
  if (widen) m.chain.push_back(widen);
  return m1;
}

// The erf form: erf's input x / sqrt(2) or x * (1 / sqrt(2)); false when it is not.
bool erf_input(const ir::Node* erf, Match& m) {
  const ir::Node* scale = erf->input(0) ? erf->input(0)->producer : nullptr;
  if (!scale || scale->outputs[0]->consumers.size() != 1) return false;
  ir::Value* x = nullptr;
  if (scale->op_type == "Div" && is_scalar(scale->input(1), std::sqrt(2.0))) x = scale->input(0);
  if (scale->op_type == "Mul" && is_scalar(scale->input(1), 1 / std::sqrt(2.0))) x = scale->input(0);
  if (!x) return false;
  m.xs.push_back(x);
  m.chain.push_back(scale);
  return true;
}

// The tanh form (GPT-2's gelu_new): tanh's input sqrt(2 / pi) * (x + 0.044715 * x^3), x^3 as Pow(x, 3); false when
// it is not.
bool tanh_input(const ir::Node* tanh, Match& m) {
  const ir::Node* scale = tanh->input(0) ? tanh->input(0)->producer : nullptr;
  if (!scale || scale->op_type != "Mul" || scale->outputs[0]->consumers.size() != 1 || scale->inputs.size() != 2)
    return false;
  const double k = std::sqrt(2 / M_PI);
  ir::Value* inner = is_scalar(scale->input(0), k) ? scale->input(1) : is_scalar(scale->input(1), k) ? scale->input(0)
                                                                                                    : nullptr;
  const ir::Node* sum = inner ? inner->producer : nullptr;
  if (!sum || sum->op_type != "Add" || inner->consumers.size() != 1 || sum->inputs.size() != 2) return false;
  for (int side = 0; side < 2; ++side) {
    ir::Value *x = sum->input(size_t(side)), *cubic = sum->input(size_t(1 - side));
    const ir::Node* mul = cubic ? cubic->producer : nullptr;
    if (!x || !mul || mul->op_type != "Mul" || cubic->consumers.size() != 1 || mul->inputs.size() != 2) continue;
    ir::Value* cube = is_scalar(mul->input(0), 0.044715) ? mul->input(1)
                      : is_scalar(mul->input(1), 0.044715) ? mul->input(0)
                                                            : nullptr;
    const ir::Node* pow = cube ? cube->producer : nullptr;
    if (!pow || pow->op_type != "Pow" || !pow->input(0) || unwidened(pow->input(0)) != unwidened(x) ||
        !is_scalar(pow->input(1), 3.0) || cube->consumers.size() != 1)
      continue;
    m.chain.insert(m.chain.end(), {scale, sum, mul, pow});
    m.xs.insert(m.xs.end(), {x, pow->input(0)});
    return true;
  }
  return false;
}

class GeluFusion : public Pass {
 public:
  std::string name() const override { return "gelu_fusion"; }
  bool apply(ir::Graph& g) const override {
    std::vector<const ir::Node*> gone;
    for (auto& n : g.nodes()) {
      const bool erf = n->op_type == "Erf";
      if (!erf && n->op_type != "Tanh") continue;
      Match m{{n.get()}, {}};
      if (!(erf ? erf_input(n.get(), m) : tanh_input(n.get(), m))) continue;
      const ir::Node* add = single_reader(n->outputs[0]);  // 1 + f(...)
      if (!add || add->op_type != "Add" || !is_scalar(other_input(add, n->outputs[0]), 1.0)) continue;
      m.chain.push_back(add);
      const ir::Node* last = tail(add, m);
      if (!last) continue;
      // The Gelu reads x in the dtype the chain's output has (x widened where that is float32 and x is not).
      ir::Value* out = last->outputs[0];
      auto x = std::find_if(m.xs.begin(), m.xs.end(), [&](const ir::Value* v) { return v->dtype == out->dtype; });
      if (x == m.xs.end()) continue;
      // The Gelu node takes over the chain's output value, name and readers included.
      ir::Attributes form;
      if (!erf) form["approximate"] = std::string("tanh");
      add_fused(g, "", 20, "Gelu", {*x}, {out}, g.unique_name("Gelu_fused"), last->backward, form);
      gone.insert(gone.end(), m.chain.begin(), m.chain.end());
    }
    return remove_all(g, gone, true);
  }
};

}  // namespace

std::unique_ptr<Pass> gelu_fusion() { return std::make_unique<GeluFusion>(); }

}  // namespace onnxtrain::passes
