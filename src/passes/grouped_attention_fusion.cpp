// Grouped attention fusion: a com.onnxtrain.FlashAttention whose keys and values are repeated per query head, as
// models write grouped-query attention for exporters (transformers' repeat_kv: Reshape(Expand(Unsqueeze(K, 2)),
// (B, H, T, d)), K holding H / g heads; the keys cast after under autocast: float32 keys from the rotary embedding),
// reads K and V themselves with kv_groups=g: the repeated copies, g times the size of K and V, are neither made nor
// stashed (the cast, if any, is of K).
#include "passes/pass.h"

namespace onnxtrain::passes {
namespace {

bool shaped(const ir::Value* v, size_t rank) { return v && v->has_shape && v->shape.size() == rank; }

// K when r is K (B, h, T, d) repeated g times per head into (B, h * g, T, d), with *groups = g; else null.
ir::Value* unrepeated(const ir::Value* r, int64_t* groups) {
  ir::Node* reshape = made_by(r, "Reshape");
  ir::Node* expand = reshape ? made_by(reshape->input(0), "Expand") : nullptr;
  ir::Node* unsqueeze = expand ? made_by(expand->input(0), "Unsqueeze") : nullptr;
  if (!unsqueeze) return nullptr;
  ir::Value *k = unsqueeze->input(0), *u = expand->input(0), *e = reshape->input(0);
  if (!shaped(k, 4) || !shaped(u, 5) || !shaped(e, 5) || !shaped(r, 4)) return nullptr;
  const Shape &ks = k->shape, &us = u->shape, &es = e->shape, &rs = r->shape;
  const Dim& g = es[2];
  if (us[2] != Dim(1) || !g.is_const() || g.value() < 2) return nullptr;
  for (size_t i : {0, 1, 3, 4})
    if (us[i] != ks[i > 2 ? i - 1 : i] || es[i] != us[i]) return nullptr;
  if (rs[0] != ks[0] || rs[1] != ks[1] * g || rs[2] != ks[2] || rs[3] != ks[3]) return nullptr;
  *groups = g.value();
  return k;
}

class GroupedAttentionFusion : public Pass {
 public:
  std::string name() const override { return "grouped_attention_fusion"; }
  bool apply(ir::Graph& g) const override {
    std::vector<const ir::Node*> gone;
    for (ir::Node* f : nodes_of(g, "FlashAttention", "com.onnxtrain")) {
      if (f->has_attr("kv_groups")) continue;
      int64_t gk = 0, gv = 0;
      ir::Node* narrow = made_by(f->input(1), "Cast");
      ir::Value *k = unrepeated(narrow ? narrow->input(0) : f->input(1), &gk), *v = unrepeated(f->input(2), &gv);
      if (!k || !v || gk != gv) continue;
      const int64_t opset = g.opsets.count("") ? g.opsets.at("") : 13;
      if (narrow) {
        ir::Value* kc = g.add_value(g.unique_name(k->name + "_cast"));
        add_fused(g, "", opset, "Cast", {k}, {kc}, g.unique_name(narrow->name + "_grouped"), narrow->backward,
                  {{"to", narrow->attr_int("to", 0)}});
        k = kc;
      }
      std::vector<ir::Value*> in = f->inputs;
      in[1] = k, in[2] = v;
      ir::Attributes attrs = f->attrs;
      attrs["kv_groups"] = gk;
      const std::vector<ir::Value*> outs = f->outputs;  // (a copy: add_fused gives f placeholders instead)
      ir::Node* grouped = add_fused(g, "com.onnxtrain", 1, "FlashAttention", in, outs,
                                    g.unique_name(f->name + "_grouped"), f->backward, attrs);
      grouped->random_key = f->key();
      gone.push_back(f);  // (the repeating nodes go with dead code when nothing else reads them)
    }
    return remove_all(g, gone, true);
  }
};

}  // namespace

std::unique_ptr<Pass> grouped_attention_fusion() { return std::make_unique<GroupedAttentionFusion>(); }

}  // namespace onnxtrain::passes
