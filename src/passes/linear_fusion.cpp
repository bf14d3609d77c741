// Linear fusion: Add(MatMul(X, Transpose(W)), B), as exporters write a Linear layer, becomes one
// com.onnxtrain.Linear(X, W, B) (also without the Add when there is no bias): no transposed copy of W, no
// pass over the output to add the bias. Only when the intermediate values have no other readers.
#include <algorithm>

#include "passes/pass.h"

namespace onnxtrain::passes {
namespace {

class LinearFusion : public Pass {
 public:
  std::string name() const override { return "linear_fusion"; }
  bool apply(ir::Graph& g) const override {
    std::vector<const ir::Node*> gone;
    for (ir::Node* m : nodes_of(g, "MatMul")) {
      ir::Value *x = m->input(0), *wt = m->input(1);
      const ir::Node* t = wt ? wt->producer : nullptr;
      if (!x || !t || t->op_type != "Transpose" || !t->domain.empty() || !sole_reader(g, wt, m)) continue;
      ir::Value* w = t->input(0);
      if (!w || !w->has_shape || w->shape.size() != 2 || t->attr_ints("perm", {1, 0}) != std::vector<int64_t>{1, 0})
        continue;
      // A bias: the MatMul's only reader adds a vector of W's rows.
      ir::Node* add = m->outputs[0]->consumers.size() == 1 ? m->outputs[0]->consumers[0] : nullptr;
      ir::Value* bias = nullptr;
      if (add && add->op_type == "Add" && add->domain.empty() && add->backward == m->backward &&
          sole_reader(g, m->outputs[0], add)) {
        bias = add->input(0) == m->outputs[0] ? add->input(1) : add->input(0);
        if (!bias || !bias->has_shape || bias->shape.size() != 1 || bias->shape[0] != w->shape[0]) bias = nullptr;
      }
      ir::Node* last = bias ? add : m;
      ir::Value* out = last->outputs[0];
      // The Linear node takes over the last node's output value (name, readers, graph-output role).
      std::vector<ir::Value*> ins = {x, w};
      if (bias) ins.push_back(bias);
      add_fused(g, "com.onnxtrain", 1, "Linear", ins, {out}, g.unique_name(m->name + "_linear"), m->backward);
      gone.push_back(t);
      gone.push_back(m);
      if (bias) gone.push_back(add);
    }
    return remove_all(g, gone, true);
  }
};

}  // namespace

std::unique_ptr<Pass> linear_fusion() { return std::make_unique<LinearFusion>(); }

}  // namespace onnxtrain::passes
