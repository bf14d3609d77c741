// Attention softmax fusion: com.onnxtrain.MaskedSoftmax(MatMul(A, B), scale, cond, fill), the product read by
// nothing else, becomes com.onnxtrain.AttentionSoftmax(A, B, scale, cond, fill), which computes the product only
// where the mask leaves some row of a tile open (half of it under a causal mask).
#include "passes/pass.h"

namespace onnxtrain::passes {
namespace {

class AttentionSoftmaxFusion : public Pass {
 public:
  std::string name() const override { return "attention_softmax_fusion"; }
  bool apply(ir::Graph& g) const override {
    std::vector<const ir::Node*> gone;
    for (ir::Node* s : nodes_of(g, "MaskedSoftmax", "com.onnxtrain")) {
      ir::Value* scores = s->input(0);
      ir::Node* mm = scores ? scores->producer : nullptr;
      if (!mm || mm->op_type != "MatMul" || !mm->domain.empty() || !has_inputs(mm, 2) || !sole_reader(g, scores, s))
        continue;
      ir::Value *a = mm->input(0), *b = mm->input(1);
      if (!a->has_shape || !b->has_shape || a->shape.size() < 2 || b->shape.size() < 2 || !dtype_is_float(a->dtype))
        continue;
      add_fused(g, "com.onnxtrain", 1, "AttentionSoftmax", {a, b, s->input(1), s->input(2), s->input(3)},
                {s->outputs[0]}, g.unique_name(s->name + "_attention"), s->backward);
      gone.insert(gone.end(), {mm, s});
    }
    return remove_all(g, gone, true);
  }
};

}  // namespace

std::unique_ptr<Pass> attention_softmax_fusion() { return std::make_unique<AttentionSoftmaxFusion>(); }

}  // namespace onnxtrain::passes
