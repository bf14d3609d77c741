// Attention layout: a com.onnxtrain.FlashAttention whose Q, K or V is Transpose(x, (0, 2, 1, 3)) of a (B, T, H, d)
// x, or whose Y's one reader is that Transpose (making (B, T, H, dv); through a Reshape to Y's own shape, as the
// exporters write scaled_dot_product_attention's output), as models split a projection into heads and
// merge the heads back, reads x and writes the Transpose's output itself: attribute sequence_major flags the operands
// so laid out (ops/flash_attention.cpp), and the kernels read their rows where they lie. The transposed copies are
// neither made nor stashed (shape_past_transpose has a Shape read off x what it read off them), and the gradient,
// which takes the flags, writes dQ, dK and dV as x lies and reads dY as
// the merged heads' gradient comes (GPT-2: 8 transposed copies a layer and step, forward and backward). Where a
// FlashAttentionGrad reads the node already (the training graph), the node stays as it is.
#include "passes/pass.h"

namespace onnxtrain::passes {
namespace {

const std::vector<int64_t> kHeadsSwapped{0, 2, 1, 3};

// x where v is Transpose(x, (0, 2, 1, 3)) of a rank-4 x, else null.
ir::Value* untransposed(const ir::Value* v) {
  ir::Node* t = made_by(v, "Transpose");
  if (!t || t->attr_ints("perm") != kHeadsSwapped || !t->input(0)->has_shape || t->input(0)->shape.size() != 4)
    return nullptr;
  return t->input(0);
}

// The Transpose(., (0, 2, 1, 3)) that is y's one reader (or the one reader of y's one reader, a Reshape to y's own
// shape), with that Reshape in *reshape; else null.
ir::Node* merging_heads(const ir::Graph& g, const ir::Value* y, ir::Node** reshape) {
  if (!y->has_shape || y->shape.size() != 4) return nullptr;
  ir::Node* t = only_reader(g, y);
  *reshape = nullptr;
  if (t && t->op_type == "Reshape" && t->domain.empty() && t->outputs[0]->has_shape && t->outputs[0]->shape == y->shape)
    *reshape = t, t = only_reader(g, t->outputs[0]);
  const bool merges = t && t->op_type == "Transpose" && t->domain.empty() && t->attr_ints("perm") == kHeadsSwapped;
  return merges ? t : nullptr;
}

bool differentiated(const ir::Node* f) {
  for (const ir::Value* out : f->outputs)
    if (out)
      for (const ir::Node* c : out->consumers)
        if (c->op_type == "FlashAttentionGrad") return true;
  return false;
}

class AttentionLayout : public Pass {
 public:
  std::string name() const override { return "attention_layout"; }
  bool apply(ir::Graph& g) const override {
    std::vector<const ir::Node*> gone;
    for (ir::Node* f : nodes_of(g, "FlashAttention", "com.onnxtrain")) {
      if (f->has_attr("sequence_major") || !has_inputs(f, 3) || differentiated(f)) continue;
      std::vector<int64_t> flags(4, 0);
      std::vector<ir::Value*> in = f->inputs, outs = f->outputs;
      for (size_t i = 0; i < 3; ++i)
        if (ir::Value* x = untransposed(in[i])) in[i] = x, flags[i] = 1;
      ir::Node* reshape = nullptr;
      if (ir::Node* merge = merging_heads(g, outs[0], &reshape)) {
        outs[0] = merge->outputs[0];
        flags[3] = 1;
        gone.push_back(merge);
        if (reshape) gone.push_back(reshape);
      }
      if (flags == std::vector<int64_t>(4, 0)) continue;
      ir::Attributes attrs = f->attrs;
      attrs["sequence_major"] = flags;
      ir::Node* laid = add_fused(g, "com.onnxtrain", f->opset, "FlashAttention", in, outs,
                                 g.unique_name(f->name + "_laid"), f->backward, attrs);
      laid->random_key = f->key();
      gone.push_back(f);  // (the Transposes of the operands go with dead code when nothing else reads them)
    }
    return remove_all(g, gone, true);
  }
};

}  // namespace

std::unique_ptr<Pass> attention_layout() { return std::make_unique<AttentionLayout>(); }

}  // namespace onnxtrain::passes
