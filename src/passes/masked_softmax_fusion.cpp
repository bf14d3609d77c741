// Masked softmax fusion: Softmax(Where(cond, fill, Mul(X, scale))) along the last axis, with scale and fill
// constant scalars, as exporters write scaled, masked attention, becomes one com.onnxtrain.MaskedSoftmax
// (one pass over the scores instead of three). Only when the intermediate values have no other readers.
#include <algorithm>

#include "passes/pass.h"

namespace onnxtrain::passes {
namespace {

class MaskedSoftmaxFusion : public Pass {
 public:
  std::string name() const override { return "masked_softmax_fusion"; }
  bool apply(ir::Graph& g) const override {
    std::vector<const ir::Node*> gone;
    for (ir::Node* s : nodes_of(g, "Softmax")) {
      if (s->opset < 13) continue;
      ir::Value* w = s->input(0);
      int64_t axis = s->attr_int("axis", -1);
      if (!w || !w->has_shape || w->shape.empty() || (axis != -1 && axis != int64_t(w->shape.size()) - 1)) continue;
      ir::Node* where = w->producer;
      if (!where || where->op_type != "Where" || !where->domain.empty() || !sole_reader(g, w, s)) continue;
      ir::Value *cond = where->input(0), *fill = where->input(1), *z = where->input(2);
      if (!constant_scalar(fill) || !z || !z->producer || !sole_reader(g, z, where) || !cond || !cond->has_shape)
        continue;
      ir::Node* mul = z->producer;
      if (mul->op_type != "Mul" || !mul->domain.empty() || !z->has_shape || z->shape != w->shape) continue;
      size_t which = constant_scalar(mul->input(1)) ? 1 : constant_scalar(mul->input(0)) ? 0 : 2;
      if (which == 2) continue;
      ir::Value *x = mul->input(1 - which), *scale = mul->input(which);
      if (!x || !x->has_shape || x->shape != w->shape || x->dtype != fill->dtype || scale->dtype != x->dtype) continue;
      ir::Value* out = s->outputs[0];
      add_fused(g, "com.onnxtrain", 1, "MaskedSoftmax", {x, scale, cond, fill}, {out},
                g.unique_name(s->name + "_masked"), s->backward);
      gone.insert(gone.end(), {mul, where, s});
    }
    return remove_all(g, gone, true);
  }
};

}  // namespace

std::unique_ptr<Pass> masked_softmax_fusion() { return std::make_unique<MaskedSoftmaxFusion>(); }

}  // namespace onnxtrain::passes
