// Flash attention fusion: MatMul(P, V) with P = S or Dropout(S, ratio, training_mode), where S is
// com.onnxtrain.AttentionSoftmax(Q, Kt, scale, cond, fill) (what masked_softmax_fusion and   attention_softmax_fusion
// make of a scaled, masked_fill-ed product), or   Softmax(Z + bias) or Softmax(Z), Z = Q Kt, (Q Kt) * scale or (Q Kt) /
// scale, bias computed from no trainable   weight (what scaled_dot_product_attention exports: its scale applied to Q
// and Kt beforehand, or the product   divided by the square root of a head size the graph reads off a shape; its masks
// additive), or either of them made safe: Where(IsNaN(S), 0, S) (scaled_dot_product_attention's fully masked rows give
// 0), every value between read by nothing else, becomes com.onnxtrain.FlashAttention(Q, K, V, ...) -> (Y, LSE):
// attention that never holds the (..., Tq, Tk) probabilities, and whose training stashes the row log-sum-exp instead of
// them. It reads the keys a row each: K is what the Transpose making Kt transposes (with that Transpose's last two dims
// swapped, none where that leaves them in place; through a Mul by a scalar, the scale exporters put on the keys), else
// a Transpose of Kt. The fused node keeps the Dropout's random key and numbers the scores as it did, so it drops the
// same elements.
#include <algorithm>
#include <set>

#include "passes/pass.h"

namespace onnxtrain::passes {
namespace {

// Whether two matrices (rank >= 2) have the same batch dims.
bool same_batch(const ir::Value* a, const ir::Value* b) {
  return a->shape.size() == b->shape.size() && std::equal(a->shape.begin(), a->shape.end() - 2, b->shape.begin());
}

bool unread(const ir::Graph& g, const ir::Value* v) {
  return !v || (v->consumers.empty() && std::find(g.outputs.begin(), g.outputs.end(), v) == g.outputs.end());
}

// Whether the operands are what the kernel takes: Q holds every batch index of the scores, K and V share theirs.
bool fits(const ir::Value* q, const ir::Value* kt, const ir::Value* v, const ir::Value* scores) {
  for (const ir::Value* x : {q, kt, v, scores})
    if (!x->has_shape || x->shape.size() < 2) return false;
  return dtype_is_float(q->dtype) && kt->dtype == q->dtype && v->dtype == q->dtype && same_batch(q, scores) &&
         same_batch(kt, v);
}

// Whether no gradient reaches v from a trainable initializer (a mask, not a learned bias: its gradient is not
// formed). Integer and bool values carry none: a mask built from the shape of an embedding's output is untrained.
// (cast_like_to_cast has run: a CastLike, whose second input gives a dtype alone, would read as a path here.)
bool untrained(const ir::Value* v) {
  std::vector<const ir::Value*> todo = {v};
  std::set<const ir::Value*> seen;
  while (!todo.empty()) {
    const ir::Value* u = todo.back();
    todo.pop_back();
    if (!u || !seen.insert(u).second || !dtype_is_float(u->dtype)) continue;
    if (u->trainable) return false;
    if (u->producer) todo.insert(todo.end(), u->producer->inputs.begin(), u->producer->inputs.end());
  }
  return true;
}

// The softmax under Where(IsNaN(S), 0, S) (what scaled_dot_product_attention's exporters write for a bool mask:
// a fully masked row gives zeros, not NaN), and the two nodes it replaces; null when p is not that.
ir::Node* safe_softmax(const ir::Graph& g, const ir::Value* p, std::vector<const ir::Node*>* nodes) {
  ir::Node* where = p->producer;
  if (!where || where->op_type != "Where" || !where->domain.empty() || !has_inputs(where, 3)) return nullptr;
  ir::Node* isnan = where->input(0)->producer;
  ir::Value *zero = where->input(1), *s = where->input(2);
  if (!isnan || isnan->op_type != "IsNaN" || !isnan->domain.empty() || isnan->input(0) != s || !s->producer ||
      !sole_reader(g, where->input(0), where) || !constant_scalar(zero) || zero->initializer->to_double()[0] != 0)
    return nullptr;
  const bool only_these = s->consumers.size() == 2 &&
                          std::count(s->consumers.begin(), s->consumers.end(), where) == 1 &&
                          std::count(s->consumers.begin(), s->consumers.end(), isnan) == 1 &&
                          std::find(g.outputs.begin(), g.outputs.end(), s) == g.outputs.end();
  if (!only_these) return nullptr;
  nodes->insert(nodes->end(), {where, isnan});
  return s->producer;
}

// perm with its last two entries swapped: the perm giving the transpose of Transpose(x, perm).
std::vector<int64_t> swap_last(std::vector<int64_t> perm) {
  std::swap(perm[perm.size() - 2], perm[perm.size() - 1]);
  return perm;
}

bool identity(const std::vector<int64_t>& perm) {
  for (size_t i = 0; i < perm.size(); ++i)
    if (perm[i] != int64_t(i)) return false;
  return true;
}

// K (..., Tk, d) for Kt (..., d, Tk), made in front of node `at`'s place (see the file's comment).
ir::Value* keys_of(ir::Graph& g, ir::Value* kt, const ir::Node* at) {
  const int64_t opset = g.opsets.count("") ? g.opsets.at("") : 13;
  const size_t rank = kt->shape.size();
  ir::Node* t = made_by(kt, "Transpose");
  if (t && t->attr_ints("perm").size() == rank) {
    const std::vector<int64_t> perm = swap_last(t->attr_ints("perm"));
    if (identity(perm)) return t->input(0);
    ir::Value* k = g.add_value(g.unique_name(t->input(0)->name + "_keys"));
    add_fused(g, "", opset, "Transpose", {t->input(0)}, {k}, g.unique_name(t->name + "_keys"), at->backward,
              {{"perm", perm}});
    return k;
  }
  ir::Node* mul = made_by(kt, "Mul");
  const size_t scalar = mul && has_inputs(mul, 2) && constant_scalar(mul->input(1)) ? 1 : 0;
  if (mul && has_inputs(mul, 2) && constant_scalar(mul->input(scalar)) && mul->input(1 - scalar)->has_shape &&
      mul->input(1 - scalar)->shape.size() == rank) {
    ir::Value* k = g.add_value(g.unique_name(kt->name + "_keys"));
    add_fused(g, "", opset, "Mul", {keys_of(g, mul->input(1 - scalar), at), mul->input(scalar)}, {k},
              g.unique_name(mul->name + "_keys"), at->backward);
    return k;
  }
  std::vector<int64_t> perm(rank);
  for (size_t i = 0; i < rank; ++i) perm[i] = int64_t(i);
  ir::Value* k = g.add_value(g.unique_name(kt->name + "_keys"));
  add_fused(g, "", opset, "Transpose", {kt}, {k}, g.unique_name(kt->name + "_transposed"), at->backward,
            {{"perm", swap_last(perm)}});
  return k;
}

// Whether v can be the scores' scale: a float of one element that no gradient reaches, a constant or computed (as
// 1 / sqrt of a head size read off a shape, where the exporters keep that size dynamic).
bool scale_scalar(const ir::Value* v) {
  if (constant_scalar(v)) return true;
  if (!v || !dtype_is_float(v->dtype) || !v->has_shape || v->shape.size() > 1 || !untrained(v)) return false;
  return v->shape.empty() || (v->shape[0].is_const() && v->shape[0].value() == 1);
}

// The attention a plain Softmax ends, as FlashAttention's inputs before V (Q, Kt, scale, cond, fill, ratio,
// training_mode, bias: V, ratio and training_mode left empty) and the nodes it replaces; false when it is not one.
// `divides`: the scores are divided by the scale input, not multiplied.
bool plain_attention(const ir::Graph& g, const ir::Node* softmax, std::vector<ir::Value*>* in,
                     std::vector<const ir::Node*>* nodes, bool* divides) {
  if (softmax->op_type != "Softmax" || !softmax->domain.empty() || softmax->opset < 13) return false;
  ir::Value* x = softmax->input(0);
  if (!x) return false;
  int64_t axis = softmax->attr_int("axis", -1);
  if (!x->has_shape || (axis != -1 && axis != int64_t(x->shape.size()) - 1) || !sole_reader(g, x, softmax))
    return false;
  ir::Value *z = x, *bias = nullptr, *scale = nullptr;
  ir::Node* add = x->producer;
  if (add && add->op_type == "Add" && add->domain.empty() && has_inputs(add, 2)) {
    for (const char* op : {"MatMul", "Mul", "Div"})  // (the product itself first: a mask may be scaled too)
      for (size_t k = 0; k < 2 && z == x; ++k) {
        ir::Node* p = add->input(k)->producer;
        if (p && p->op_type == op && p->domain.empty()) z = add->input(k), bias = add->input(1 - k);
      }
    if (z == x || !sole_reader(g, z, add) || !untrained(bias) || bias->dtype != x->dtype || !bias->has_shape ||
        bias->shape.size() > x->shape.size())
      return false;
    nodes->push_back(add);
  }
  ir::Node* mm = z->producer;
  *divides = mm && mm->op_type == "Div";
  if (mm && (mm->op_type == "Mul" || *divides) && mm->domain.empty() && has_inputs(mm, 2)) {
    size_t which = scale_scalar(mm->input(1)) ? 1 : !*divides && scale_scalar(mm->input(0)) ? 0 : 2;
    if (which == 2 || mm->input(which)->dtype != x->dtype) return false;
    scale = mm->input(which);
    ir::Value* product = mm->input(1 - which);
    if (!sole_reader(g, product, mm)) return false;
    nodes->push_back(mm);
    mm = product->producer;
  }
  if (!mm || mm->op_type != "MatMul" || !mm->domain.empty() || !has_inputs(mm, 2)) return false;
  nodes->push_back(mm);
  *in = {mm->input(0), mm->input(1), scale, nullptr, nullptr, nullptr, nullptr, bias};
  return true;
}

class FlashAttentionFusion : public Pass {
 public:
  std::string name() const override { return "flash_attention_fusion"; }
  bool apply(ir::Graph& g) const override {
    std::vector<const ir::Node*> gone;
    for (ir::Node* mm : nodes_of(g, "MatMul")) {
      if (!has_inputs(mm, 2)) continue;
      ir::Value *p = mm->input(0), *v = mm->input(1);
      ir::Node* dropout = p->producer && p->producer->op_type == "Dropout" ? p->producer : nullptr;
      if (dropout && (dropout->opset < 12 || !has_inputs(dropout, 1) || !dropout->domain.empty() ||
                      !unread(g, dropout->outputs.size() > 1 ? dropout->outputs[1] : nullptr)))
        continue;
      ir::Value* probs = dropout ? dropout->input(0) : p;
      ir::Node* softmax = probs->producer;
      if (!softmax || !sole_reader(g, p, mm) || (dropout && !sole_reader(g, probs, dropout))) continue;
      std::vector<const ir::Node*> replaced{mm};
      ir::Node* under_safe = safe_softmax(g, probs, &replaced);
      if (under_safe) softmax = under_safe, probs = softmax->outputs[0];
      replaced.push_back(softmax);
      // in: Q, Kt, scale, cond, fill, ratio, training_mode, bias (V goes in third)
      std::vector<ir::Value*> in;
      bool divides = false;
      if (softmax->op_type == "AttentionSoftmax" && softmax->domain == "com.onnxtrain") {
        if (!has_inputs(softmax, 2)) continue;
        in = {softmax->input(0), softmax->input(1), softmax->input(2), softmax->input(3),
              softmax->input(4), nullptr,           nullptr,           nullptr};
      } else if (!plain_attention(g, softmax, &in, &replaced, &divides)) {
        continue;
      }
      if (!fits(in[0], in[1], v, probs)) continue;
      if (divides) {  // the scale's reciprocal, a node of its own
        ir::Value* inverse = g.add_value(g.unique_name(softmax->name + "_scale"));
        add_fused(g, "", 13, "Reciprocal", {in[2]}, {inverse}, g.unique_name(softmax->name + "_reciprocal"),
                  mm->backward);
        in[2] = inverse;
      }
      in[1] = keys_of(g, in[1], mm);
      in.insert(in.begin() + 2, v);
      if (dropout) in[6] = dropout->input(1), in[7] = dropout->input(2);
      while (!in.back()) in.pop_back();
      ir::Value* lse = g.add_value(g.unique_name(softmax->name + "_lse"));
      ir::Attributes attrs;
      if (under_safe) attrs["zero_masked_rows"] = int64_t(1);
      ir::Node* f = add_fused(g, "com.onnxtrain", 1, "FlashAttention", in, {mm->outputs[0], lse},
                              g.unique_name(softmax->name + "_flash"), mm->backward, attrs);
      if (dropout) f->random_key = dropout->key();
      gone.insert(gone.end(), replaced.begin(), replaced.end());
      if (dropout) gone.push_back(dropout);
    }
    return remove_all(g, gone, true);
  }
};

}  // namespace

std::unique_ptr<Pass> flash_attention_fusion() { return std::make_unique<FlashAttentionFusion>(); }

}  // namespace onnxtrain::passes
