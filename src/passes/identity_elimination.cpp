// Identity elimination: readers of an Identity's output read its input, and a Dropout that can never drop
// (inference, or a ratio of 0), a Slice that takes all of its input (shapes equal, steps of 1) and a Concat whose
// other inputs are empty on its axis count as an Identity (of that input): Phi-3's rotary embedding of the whole head
// takes the head with a Slice and concatenates an empty "pass-through" part after it.
#include <algorithm>

#include "ops/op.h"
#include "passes/pass.h"

namespace onnxtrain::passes {
namespace {

// Whether v is a constant whose every element is `value`.
bool constant_all(const ir::Value* v, double value) {
  if (!v || !v->initializer) return false;
  for (double x : v->initializer->to_double())
    if (x != value) return false;
  return true;
}

// (an omitted training_mode means inference; an omitted ratio is not zero, 0.5)
bool is_false_or_zero(const ir::Value* v) { return !v || constant_all(v, 0); }

bool is_output(const ir::Graph& g, const ir::Value* v) {
  return std::find(g.outputs.begin(), g.outputs.end(), v) != g.outputs.end();
}

bool dropout_passes(const ir::Graph& g, const ir::Node& n) {
  const ir::Value* mask = n.outputs.size() < 2 ? nullptr : n.outputs[1];
  bool mask_unused = !mask || (mask->consumers.empty() && !is_output(g, mask));
  bool inference = is_false_or_zero(n.input(2));
  bool zero_ratio = n.input(1) && is_false_or_zero(n.input(1));
  return mask_unused && (inference || zero_ratio);
}

bool same_shape(const ir::Value* a, const ir::Value* b) {
  return a && b && a->has_shape && b->has_shape && a->shape == b->shape && a->dtype == b->dtype;
}

// Whether the dim `axis` of v is known to be 0.
bool empty_on(const ir::Value* v, int64_t axis) {
  if (!v || !v->has_shape) return false;
  const int64_t rank = int64_t(v->shape.size());
  if (axis < 0) axis += rank;
  return axis >= 0 && axis < rank && v->shape[size_t(axis)] == Dim(0);
}

// The input that n's output equals, where n is one of those this pass removes; null otherwise.
ir::Value* passed_through(const ir::Graph& g, const ir::Node& n) {
  if (!n.domain.empty() || n.outputs.empty() || !n.outputs[0]) return nullptr;
  if (n.op_type == "Identity" || (n.op_type == "Dropout" && n.opset >= 12 && dropout_passes(g, n))) return n.input(0);
  if (n.op_type == "Slice" && n.opset >= 10) {
    const bool steps_of_one = !n.input(4) || constant_all(n.input(4), 1);
    return steps_of_one && same_shape(n.input(0), n.outputs[0]) ? n.input(0) : nullptr;
  }
  if (n.op_type != "Concat") return nullptr;
  ir::Value* kept = nullptr;
  for (ir::Value* v : n.inputs) {
    if (empty_on(v, n.attr_int("axis", 0))) continue;
    if (kept) return nullptr;
    kept = v;
  }
  return same_shape(kept, n.outputs[0]) ? kept : nullptr;
}

class IdentityElimination : public Pass {
 public:
  std::string name() const override { return "identity_elimination"; }
  bool apply(ir::Graph& g) const override {
    std::vector<const ir::Node*> gone;
    for (auto& n : g.nodes()) {
      ir::Value* in = passed_through(g, *n);
      if (!in) continue;
      ir::Value* out = n->outputs[0];
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
