// Rotary embedding fusion: X cos + rotate_half(X) sin, rotate_half(X) = Concat(Neg(X2), X1) of X's halves on the
// last dim taken by Slices (how transformers writes apply_rotary_pos_emb and PyTorch's exporter exports it), the
// products and the sum in either order, X, cos and sin of one float dtype, the values between read by nothing else,
// becomes com.onnxtrain.RotaryEmbedding(X, cos, sin). Under autocast (bf16 X, float32 cos and sin) the products
// read X and rotate_half(X) up-cast alike: RotaryEmbedding(Cast(X), cos, sin), exact as the up-cast commutes with
// the halves' slices, negation and concatenation. Then the casts around any RotaryEmbedding fold into it: a 16-bit X
// up-cast to float32 cos and sin is read as it is, and a float32 Y read only by a Cast to 16 bits is written in that
// dtype (attribute `to`): under autocast the queries and keys go in and out of it in bf16, with the same values (it
// computes in float32 and rounds once, as the Cast did).
#include <cmath>

#include "passes/pass.h"

namespace onnxtrain::passes {
namespace {

// Input i of n: a constant of one element, or `missing` where the input is absent (NaN for anything else).
double input_value(const ir::Node* n, size_t i, double missing) {
  return n->input(i) ? scalar_value(n->input(i)) : missing;
}

// The input of `mul` that is x, or with `widen`, x cast as widen casts; nullptr if none.
ir::Value* x_read(const ir::Node* mul, const ir::Value* x, const ir::Node* widen) {
  for (ir::Value* v : mul->inputs) {
    if (!widen && v == x) return v;
    const ir::Node* c = v ? v->producer : nullptr;
    if (widen && c && c->op_type == "Cast" && c->input(0) == x && c->attr_int("to", 0) == widen->attr_int("to", 0))
      return v;
  }
  return nullptr;
}

// Whether `slice` takes [begin, end) of x's last dim (of `width`), end at least `width` standing for "to the end".
bool takes(const ir::Node* slice, const ir::Value* x, int64_t begin, int64_t end, int64_t width) {
  if (!slice || slice->op_type != "Slice" || !slice->domain.empty() || slice->opset < 10 || slice->input(0) != x)
    return false;
  const double b = input_value(slice, 1, NAN), e = input_value(slice, 2, NAN), axis = input_value(slice, 3, -1),
               step = input_value(slice, 4, 1);
  const double last = double(x->shape.size()) - 1;
  return (axis == -1 || axis == last) && step == 1 && b == double(begin) &&
         (e == double(end) || (end == width && e >= double(width)));
}

// RotaryEmbedding nodes reading a 16-bit X through an up-cast, or whose float32 output only a Cast to 16 bits reads,
// made again without those casts (the up-cast stays for its other readers, if any).
bool fold_casts(ir::Graph& g) {
  std::vector<const ir::Node*> gone;
  for (ir::Node* n : nodes_of(g, "RotaryEmbedding", "com.onnxtrain")) {
    if (!has_inputs(n, 3) || n->outputs.size() != 1 || !n->outputs[0] || n->input(1)->dtype != DType::kFloat32)
      continue;
    ir::Value *x = n->input(0), *y = n->outputs[0];
    ir::Node* widen = made_by(x, "Cast");
    const bool in = widen && x->dtype == DType::kFloat32 && dtype_is_16bit_float(widen->input(0)->dtype);
    ir::Node* narrow = y->dtype == DType::kFloat32 ? only_reader(g, y) : nullptr;
    const bool out = narrow && narrow->op_type == "Cast" && narrow->domain.empty() && has_inputs(narrow, 1) &&
                     narrow->outputs.size() == 1 && dtype_is_16bit_float(narrow->outputs[0]->dtype);
    if (!in && !out) continue;
    ir::Attributes attrs = n->attrs;
    if (out) attrs["to"] = int64_t(narrow->outputs[0]->dtype);
    add_fused(g, "com.onnxtrain", n->opset, "RotaryEmbedding", {in ? widen->input(0) : x, n->input(1), n->input(2)},
              {out ? narrow->outputs[0] : y}, g.unique_name(n->name + "_uncast"), n->backward, attrs);
    gone.push_back(n);
    if (out) gone.push_back(narrow);
  }
  return remove_all(g, gone, true);
}

class RotaryEmbeddingFusion : public Pass {
 public:
  std::string name() const override { return "rotary_embedding_fusion"; }
  bool apply(ir::Graph& g) const override { return fuse(g) | fold_casts(g); }

 private:
  static bool fuse(ir::Graph& g) {
    std::vector<const ir::Node*> gone;
    for (ir::Node* neg : nodes_of(g, "Neg")) {
      if (!has_inputs(neg, 1)) continue;
      ir::Node* upper = neg->input(0)->producer;
      ir::Node* cat = only_reader(g, neg->outputs[0]);
      if (!upper || !cat || cat->op_type != "Concat" || cat->inputs.size() != 2 || cat->input(0) != neg->outputs[0] ||
          !cat->input(1) || !sole_reader(g, neg->input(0), neg))
        continue;
      ir::Node* lower = cat->input(1)->producer;
      ir::Value* x = upper->input(0);
      if (!lower || !x || !x->has_shape || x->shape.empty() || !x->shape.back().is_const() ||
          !dtype_is_float(x->dtype) || !sole_reader(g, cat->input(1), cat))
        continue;
      const int64_t width = x->shape.back().value(), half = width / 2, rank = int64_t(x->shape.size());
      const int64_t axis = cat->attr_int("axis", 0);
      if (width % 2 || !last_axis(axis, rank) || !takes(upper, x, half, width, width) ||
          !takes(lower, x, 0, half, width))
        continue;
      ir::Node* rotated = only_reader(g, cat->outputs[0]);
      ir::Node* widen = rotated && rotated->op_type == "Cast" ? rotated : nullptr;  // autocast's up-cast
      if (widen) rotated = only_reader(g, widen->outputs[0]);
      ir::Value* half_rotated = widen ? widen->outputs[0] : cat->outputs[0];
      ir::Value* sin = rotated && rotated->op_type == "Mul" ? other_input(rotated, half_rotated) : nullptr;
      ir::Node* sum = sin ? only_reader(g, rotated->outputs[0]) : nullptr;
      ir::Value* other = sum && sum->op_type == "Add" ? other_input(sum, rotated->outputs[0]) : nullptr;
      ir::Node* scaled = other ? made_by(other, "Mul") : nullptr;
      ir::Value* xin = scaled ? x_read(scaled, x, widen) : nullptr;
      ir::Value* cos = xin ? other_input(scaled, xin) : nullptr;
      if (!cos || cos == xin || !dtype_is_float(xin->dtype) || !sole_reader(g, other, sum) ||
          cos->dtype != xin->dtype || sin->dtype != xin->dtype || !sum->outputs[0]->has_shape ||
          sum->outputs[0]->shape != x->shape)
        continue;
      add_fused(g, "com.onnxtrain", 1, "RotaryEmbedding", {xin, cos, sin}, {sum->outputs[0]},
                g.unique_name(sum->name + "_rotary"), sum->backward);
      gone.insert(gone.end(), {upper, lower, neg, cat, rotated, scaled, sum});
      if (widen) gone.push_back(widen);
    }
    return remove_all(g, gone, true);
  }
};

}  // namespace

std::unique_ptr<Pass> rotary_embedding_fusion() { return std::make_unique<RotaryEmbeddingFusion>(); }

}  // namespace onnxtrain::passes
