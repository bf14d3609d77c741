// Flash attention fusion: MatMul(P, V) with P = com.onnxtrain.AttentionSoftmax(Q, Kt, scale, cond, fill), or
// P = Dropout(that, ratio, training_mode), P and the softmax read by nothing else, becomes
// com.onnxtrain.FlashAttention(Q, Kt, V, scale, cond, fill[, ratio, training_mode]) -> (Y, LSE): attention that
// never holds the (..., Tq, Tk) probabilities, and whose training stashes the row log-sum-exp instead of them. The
// fused node keeps the Dropout's random key and numbers the scores as it did, so it drops the same elements.
#include <algorithm>

#include "passes/pass.h"

namespace onnxtrain::passes {
namespace {

bool same_shape(const ir::Value* a, const ir::Value* b, size_t drop_a, size_t drop_b) {
  if (a->shape.size() < drop_a || b->shape.size() < drop_b || a->shape.size() - drop_a != b->shape.size() - drop_b)
    return false;
  return std::equal(a->shape.begin(), a->shape.end() - int64_t(drop_a), b->shape.begin());
}

bool unread(const ir::Graph& g, const ir::Value* v) {
  return !v || (v->consumers.empty() && std::find(g.outputs.begin(), g.outputs.end(), v) == g.outputs.end());
}

// Whether the operands are what the kernel takes: Q holds every batch index of the scores, K and V share theirs.
bool fits(const ir::Value* q, const ir::Value* kt, const ir::Value* v, const ir::Value* scores) {
  for (const ir::Value* x : {q, kt, v, scores})
    if (!x->has_shape || x->shape.size() < 2) return false;
  return dtype_is_float(q->dtype) && kt->dtype == q->dtype && v->dtype == q->dtype && same_shape(q, scores, 2, 2) &&
         same_shape(kt, v, 2, 2);
}

class FlashAttentionFusion : public Pass {
 public:
  std::string name() const override { return "flash_attention_fusion"; }
  bool apply(ir::Graph& g) const override {
    std::vector<const ir::Node*> gone;
    std::vector<ir::Node*> products;
    for (auto& n : g.nodes())
      if (n->op_type == "MatMul" && n->domain.empty()) products.push_back(n.get());
    for (ir::Node* mm : products) {
      ir::Value *p = mm->inputs[0], *v = mm->inputs[1];
      ir::Node* dropout = p->producer && p->producer->op_type == "Dropout" ? p->producer : nullptr;
      if (dropout && (dropout->opset < 12 || !dropout->domain.empty() ||
                      !unread(g, dropout->outputs.size() > 1 ? dropout->outputs[1] : nullptr)))
        continue;
      ir::Value* probs = dropout ? dropout->inputs[0] : p;
      ir::Node* softmax = probs->producer;
      if (!softmax || softmax->op_type != "AttentionSoftmax" || softmax->domain != "com.onnxtrain" ||
          !sole_reader(g, p, mm) || (dropout && !sole_reader(g, probs, dropout)))
        continue;
      ir::Value *q = softmax->inputs[0], *kt = softmax->inputs[1];
      if (!fits(q, kt, v, probs)) continue;
      std::vector<ir::Value*> in{q, kt, v, softmax->inputs[2], softmax->inputs[3], softmax->inputs[4]};
      if (dropout) in.insert(in.end(), {dropout->input(1), dropout->input(2)});
      while (!in.back()) in.pop_back();
      ir::Value* lse = g.add_value(g.unique_name(softmax->name + "_lse"));
      ir::Node* f = add_fused(g, "com.onnxtrain", 1, "FlashAttention", in, {mm->outputs[0], lse},
                              g.unique_name(softmax->name + "_flash"), mm->backward);
      if (dropout) f->random_key = dropout->random_key.empty() ? dropout->name : dropout->random_key;
      gone.insert(gone.end(), {softmax, mm});
      if (dropout) gone.push_back(dropout);
    }
    return remove_all(g, gone, true);
  }
};

}  // namespace

std::unique_ptr<Pass> flash_attention_fusion() { return std::make_unique<FlashAttentionFusion>(); }

}  // namespace onnxtrain::passes
