// Attention layout: a com.onnxtrain.FlashAttention whose Q, K or V is Transpose(x, (0, 2, 1, 3)) of a (B, T, H, d)
// x, or whose Y's one reader is that Transpose (making (B, T, H, dv); through a Reshape to Y's own shape, as the
// exporters write scaled_dot_product_attention's output), as models split a projection into heads and merge the heads
// back, reads x and writes the Transpose's output itself: attribute sequence_major flags the operands so laid out
// (ops/flash_attention.cpp), and the kernels read their rows where they lie. The transposed copies are neither made
// nor stashed (shape_past_producer has a Shape read off x what it read off them), and the gradient, which takes the
// flags, writes dQ, dK and dV as x lies and reads dY as the merged heads' gradient comes (GPT-2: 8 transposed copies
// a layer and step, forward and backward). Where Q, K and V then come from one Split of X (B, T, (H + 2 Hkv) d) over
// its last axis (each viewed as (B, T, heads, d)), the node reads X itself (packed_heads=H): the Split's copies go,
// and the gradient's Concat of dQ, dK and dV, as the gradient writes dX. A node an earlier round laid out in part
// takes the rest; where a FlashAttentionGrad reads the node already (the training graph), it stays as it is.
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

// X and *heads = H where Q, K and V (sequence-major) are Reshape(Split(X)[i], (B, T, heads_i, d)), the Split's three
// outputs in order over X's last axis, each read by its Reshape alone; else null.
ir::Value* packed(const ir::Graph& g, const std::vector<ir::Value*>& in, int64_t groups, int64_t* heads) {
  ir::Node* split = nullptr;
  std::vector<int64_t> h(3);
  for (size_t i = 0; i < 3; ++i) {
    ir::Node* reshape = made_by(in[i], "Reshape");
    ir::Value* part = reshape ? reshape->input(0) : nullptr;
    ir::Node* s = part ? made_by(part, "Split") : nullptr;
    if (!s || (split && s != split) || s->outputs.size() != 3 || s->outputs[i] != part ||
        !sole_reader(g, part, reshape))
      return nullptr;
    split = s;
    const ir::Value* x = s->input(0);
    const Shape& r = in[i]->shape;
    if (!x->has_shape || x->shape.size() != 3 || !part->has_shape || r.size() != 4 || !r[2].is_const() ||
        r[0] != x->shape[0] || r[1] != x->shape[1] || r[3] != in[0]->shape[3])
      return nullptr;
    h[i] = r[2].value();
  }
  const int64_t axis = split->attr_int("axis", 0);
  if ((axis != 2 && axis != -1) || h[1] != h[2] || h[0] != h[1] * groups) return nullptr;
  *heads = h[0];
  return split->input(0);
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
      if (f->has_attr("packed_heads") || !has_inputs(f, 3) || differentiated(f)) continue;
      const std::vector<int64_t> had = f->attr_ints("sequence_major", {0, 0, 0, 0});  // (an earlier round's)
      if (had.size() != 4) continue;
      std::vector<int64_t> flags = had;
      std::vector<ir::Value*> in = f->inputs, outs = f->outputs;
      for (size_t i = 0; i < 3; ++i)
        if (ir::Value* x = flags[i] ? nullptr : untransposed(in[i])) in[i] = x, flags[i] = 1;
      ir::Node* reshape = nullptr;
      if (ir::Node* merge = flags[3] ? nullptr : merging_heads(g, outs[0], &reshape)) {
        outs[0] = merge->outputs[0];
        flags[3] = 1;
        gone.push_back(merge);
        if (reshape) gone.push_back(reshape);
      }
      ir::Attributes attrs = f->attrs;
      attrs["sequence_major"] = flags;
      int64_t heads = 0;
      ir::Value* x = flags[0] && flags[1] && flags[2] ? packed(g, in, f->attr_int("kv_groups", 1), &heads) : nullptr;
      if (x) {
        in[0] = x, in[1] = in[2] = nullptr;
        attrs["packed_heads"] = heads;
      } else if (flags == had) {
        continue;
      }
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
