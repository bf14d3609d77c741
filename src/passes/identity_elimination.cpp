// Identity elimination: readers of an Identity's output read its input, and a
// Dropout that can never drop (inference, or a ratio of 0) counts as an Identity.
#include <algorithm>

#include "ops/op.h"
#include "passes/pass.h"

namespace onnxtrain::passes {
namespace {

bool is_false_or_zero(const ir::Value* v) {
  if (!v) return true;  // an omitted training_mode means inference; an omitted ratio is not zero (0.5)
  if (!v->initializer) return false;
  for (double x : v->initializer->to_double())
    if (x != 0) return false;
  return true;
}

bool is_output(const ir::Graph& g, const ir::Value* v) {
  return std::find(g.outputs.begin(), g.outputs.end(), v) != g.outputs.end();
}

bool passes_through(const ir::Graph& g, const ir::Node& n) {
  if (n.op_type == "Identity") return true;
  if (n.op_type != "Dropout" || n.opset < 12) return false;
  const ir::Value* mask = n.outputs.size() < 2 ? nullptr : n.outputs[1];
  bool mask_unused = !mask || (mask->consumers.empty() && !is_output(g, mask));
  bool inference = is_false_or_zero(n.input(2));
  bool zero_ratio = n.input(1) && is_false_or_zero(n.input(1));
  return mask_unused && (inference || zero_ratio);
}

class IdentityElimination : public Pass {
 public:
  std::string name() const override { return "identity_elimination"; }
  bool apply(ir::Graph& g) const override {
    std::vector<const ir::Node*> gone;
    for (auto& n : g.nodes()) {
      if (!passes_through(g, *n) || !n->input(0) || !n->outputs[0]) continue;
      ir::Value *in = n->input(0), *out = n->outputs[0];
      if (is_output(g, out)) continue;  // a graph output keeps its name: its producer stays
      g.replace_uses(out, in);
      gone.push_back(n.get());
    }
    return remove_all(g, gone, false);
  }
};

}  // namespace

std::unique_ptr<Pass> identity_elimination() { return std::make_unique<IdentityElimination>(); }

}  // namespace onnxtrain::passes
