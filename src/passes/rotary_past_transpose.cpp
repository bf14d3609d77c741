// Rotary embedding past a Transpose: RotaryEmbedding(Transpose(x, perm), cos, sin) whose perm keeps the last dim
// last, read by fused attentions alone (their Q or K), becomes Transpose(RotaryEmbedding(x, Transpose(cos, perm),
// Transpose(sin, perm)), perm^-1): the rotation acts along the last dim alone, so the heads may lie either way, and
// cos and sin (a sequence's, shared by every layer) are transposed instead of the queries and keys. The attention
// then takes the Transpose after it in (attention_layout): Llama's queries and keys, (B, T, H, d) as the
// projections write them, are rotated and attended where they lie, forward and backward.
#include <algorithm>

#include "passes/pass.h"

namespace onnxtrain::passes {
namespace {

bool attention_reads(const ir::Graph& g, const ir::Value* y) {
  if (y->consumers.empty() || std::find(g.outputs.begin(), g.outputs.end(), y) != g.outputs.end()) return false;
  for (const ir::Node* c : y->consumers)  // (a Shape's reading too: it moves back, shape_past_producer)
    if (c->op_type == "Shape" && c->domain.empty()) continue;
    else if (c->op_type != "FlashAttention" || c->domain != "com.onnxtrain" || c->input(2) == y ||
        c->has_attr("packed_heads"))
      return false;
  return true;
}

class RotaryPastTranspose : public Pass {
 public:
  std::string name() const override { return "rotary_past_transpose"; }
  bool apply(ir::Graph& g) const override {
    std::vector<const ir::Node*> gone;
    const int64_t opset = g.opsets.count("") ? g.opsets.at("") : 13;
    for (ir::Node* r : nodes_of(g, "RotaryEmbedding", "com.onnxtrain")) {
      ir::Node* t = has_inputs(r, 3) ? made_by(r->input(0), "Transpose") : nullptr;
      if (!t || !attention_reads(g, r->outputs[0])) continue;
      const std::vector<int64_t> perm = t->attr_ints("perm");
      const size_t rank = perm.size();
      if (rank < 2 || perm.back() != int64_t(rank) - 1 || !r->input(1)->has_shape || !r->input(2)->has_shape ||
          r->input(1)->shape.size() != rank || r->input(2)->shape.size() != rank)
        continue;
      std::vector<int64_t> inverse(rank);
      for (size_t i = 0; i < rank; ++i) inverse[size_t(perm[i])] = int64_t(i);
      std::vector<ir::Value*> in{t->input(0)};
      for (size_t i = 1; i < 3; ++i) {
        ir::Value* moved = g.add_value(g.unique_name(r->input(i)->name + "_moved"));
        add_fused(g, "", opset, "Transpose", {r->input(i)}, {moved}, g.unique_name(r->name + "_table"), r->backward,
                  {{"perm", perm}});
        in.push_back(moved);
      }
      ir::Value* rotated = g.add_value(g.unique_name(r->outputs[0]->name + "_in_place"));
      add_fused(g, r->domain, r->opset, "RotaryEmbedding", in, {rotated}, g.unique_name(r->name + "_past"),
                r->backward, r->attrs);
      add_fused(g, "", opset, "Transpose", {rotated}, {r->outputs[0]}, g.unique_name(r->name + "_after"), r->backward,
                {{"perm", inverse}});
      gone.push_back(r);
    }
    return remove_all(g, gone, true);
  }
};

}  // namespace

std::unique_ptr<Pass> rotary_past_transpose() { return std::make_unique<RotaryPastTranspose>(); }

}  // namespace onnxtrain::passes
