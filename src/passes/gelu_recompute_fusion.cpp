// GELU recompute fusion: where backward recomputes Y = Gelu(X) (a memory-optimizer clone) and also computes
// dX = GeluGrad(dY, X) of the same form (exact, or tanh: GPT-2's) from the same X, one
// com.onnxtrain.GeluAndGrad(dY, X) -> (dX, Y) makes both in one pass over X and dY (erf(X) evaluated once on the
// CPU): the recompute costs about one pass over X more than the gradient alone (two before). The fused node waits
// for dY, so the recomputed Y comes later, not sooner, than its clone did.
#include <set>
#include <vector>

#include "passes/pass.h"

namespace onnxtrain::passes {
namespace {

std::string gelu_form(const ir::Node& n) { return n.attr_string("approximate", "none"); }

// Whether v is computed from `node`'s outputs (then a node reading both would close a cycle): when other clones
// recompute what comes after the GELU, the gradient dY itself may wait for the recomputed Y.
bool depends_on(const ir::Value* v, const ir::Node* node) {
  std::set<const ir::Node*> seen;
  std::vector<const ir::Node*> todo;
  if (v && v->producer) todo.push_back(v->producer);
  while (!todo.empty()) {
    const ir::Node* n = todo.back();
    todo.pop_back();
    if (n == node) return true;
    if (!seen.insert(n).second) continue;
    for (const ir::Value* u : n->inputs)
      if (u && u->producer) todo.push_back(u->producer);
  }
  return false;
}

class GeluRecomputeFusion : public Pass {
 public:
  std::string name() const override { return "gelu_recompute_fusion"; }
  bool apply(ir::Graph& g) const override {
    std::vector<const ir::Node*> gone;
    std::vector<std::pair<ir::Node*, ir::Node*>> pairs;  // (recomputed Gelu, GeluGrad of the same input)
    for (auto& n : g.nodes()) {
      if (!n->backward || n->op_type != "Gelu" || !n->domain.empty() || !has_inputs(n.get(), 1)) continue;
      for (ir::Node* r : n->input(0)->consumers)
        if (r->backward && r->op_type == "GeluGrad" && r->domain == "com.onnxtrain" &&
            gelu_form(*r) == gelu_form(*n) && r->input(1) == n->input(0) &&
            r->input(0) && r->input(0)->dtype == n->input(0)->dtype && !depends_on(r->input(0), n.get())) {
          pairs.emplace_back(n.get(), r);
          break;
        }
    }
    for (auto [gelu, grad] : pairs) {
      ir::Attributes attrs;
      if (gelu_form(*gelu) != "none") attrs["approximate"] = gelu_form(*gelu);
      add_fused(g, "com.onnxtrain", 1, "GeluAndGrad", {grad->input(0), gelu->input(0)},
                {grad->outputs[0], gelu->outputs[0]}, g.unique_name(gelu->name + "_and_grad"), true, attrs);
      gone.insert(gone.end(), {gelu, grad});
    }
    return remove_all(g, gone, true);
  }
};

}  // namespace

std::unique_ptr<Pass> gelu_recompute_fusion() { return std::make_unique<GeluRecomputeFusion>(); }

}  // namespace onnxtrain::passes
