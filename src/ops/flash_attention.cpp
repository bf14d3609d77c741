// Memory-efficient attention, fused:
// com.onnxtrain.FlashAttention(Q, K, V, scale?, cond?, fill?, ratio?, training_mode?, bias?) -> (Y, LSE) computes
//   Y = Dropout(Softmax(Where(cond, fill, (Q K^T) * scale + bias)), ratio, training_mode) V
// (scale 1 when omitted; bias a constant of the graph, such as the additive masks scaled_dot_product_attention and
// transformers build, broadcast to the scores)
// with Q (..., Tq, d), K (..., Tk, d) (a key a row: the fusion takes the transpose exporters write for the scores'
// product away), V (..., Tk, dv), the batch dims of K and V broadcast to Q's (grouped-query attention); LSE (..., Tq)
// is each row's log-sum-exp
// of the scores, in float32 (float64 for float64 inputs). A row whose every score is -inf (fully masked) gives NaN
// as Softmax does, or zeros with attribute zero_masked_rows=1 (what scaled_dot_product_attention gives; its LSE
// is then +inf, so the backward's probabilities and gradients there are 0). With attribute kv_groups=g, K and V hold
// a head for each g query heads (grouped-query attention as models write it, K and V repeated per query head, made
// into this by the grouped_attention_fusion pass): their last batch dim is Q's divided by g, query head h reading
// key-value head h / g. The kernel
// (kernels/cpu/flash_attention.cpp) runs tiles of keys with an online softmax and never holds the (..., Tq, Tk)
// probabilities; the backward recomputes them a tile at a time from LSE, so training stashes Q, K, V, Y and LSE instead
// of the probabilities (and the dropout mask): com.onnxtrain.FlashAttentionGrad(dY, Q, K, V, Y, LSE, scale, cond,
// fill, ratio, training_mode, bias) -> (dQ, dK, dV), which draws the forward's dropout mask again from the same random
// key. The flash_attention_fusion pass makes it from what exporters write.
// Attribute sequence_major (4 flags: Q, K, V, Y; default 0) names the operands given as (B, T, H, d), a sequence
// position's heads side by side as the projections write them, where the attention reads (or writes) their (B, H, T,
// d) transpose: the attention_layout pass takes the Transposes around the attention into it, and the gradient reads
// and writes each operand's gradient as the operand lies. Attribute packed_heads=H (Q, K and V sequence-major) takes
// the three from one input, X (B, T, (H + 2 Hkv) d) as a projection writes them side by side (Hkv = H / kv_groups):
// FlashAttention(X, , , ...), whose gradient writes dX, its one output.
#include <algorithm>

#include "ops/grad.h"
#include "ops/op.h"
#include "ops/shape_util.h"

namespace onnxtrain::ops {
namespace {

enum Input : size_t { kQ, kK, kV, kScale, kCond, kFill, kRatio, kTraining, kBias };

bool has_dropout(const ir::Node& n) { return n.input(kRatio) != nullptr; }

// The sequence_major flags of Q, K, V and Y.
std::vector<int64_t> sequence_major(InferCtx& ctx) {
  std::vector<int64_t> f = ctx.node().attr_ints("sequence_major", {0, 0, 0, 0});
  if (f.size() != 4) ctx.fail("sequence_major must hold 4 flags (Q, K, V, Y), not " + std::to_string(f.size()));
  return f;
}

// (B, T, H, d) as (B, H, T, d), or the shape as it is (flag 0).
Shape heads_first(InferCtx& ctx, Shape s, int64_t flag, const char* what) {
  if (!flag) return s;
  if (s.size() != 4) ctx.fail(std::string(what) + " " + shape_str(s) + " must have rank 4 (B, T, H, d)");
  std::swap(s[1], s[2]);
  return s;
}

// The operands as the attention reads them: Q (..., Tq, d), K (..., Tk, d), V (..., Tk, dv).
struct Operands {
  Shape q, k, v;
};
// Q, K and V of X (B, T, (H + 2 Hkv) d) where packed_heads=H.
Operands packed(InferCtx& ctx, const Shape& x) {
  const int64_t heads = ctx.node().attr_int("packed_heads", 0), groups = ctx.node().attr_int("kv_groups", 1);
  const std::vector<int64_t> f = sequence_major(ctx);
  if (groups < 1 || heads % groups != 0 || !f[0] || !f[1] || !f[2])
    ctx.fail("packed_heads " + std::to_string(heads) + " needs sequence-major Q, K and V and heads a multiple of " +
             "kv_groups " + std::to_string(groups));
  const int64_t all = heads + 2 * (heads / groups);
  if (x.size() != 3 || !x[2].is_const() || x[2].value() % all != 0)
    ctx.fail("packed X " + shape_str(x) + " must be (B, T, " + std::to_string(all) + " d) for " +
             std::to_string(heads) + " heads");
  const Dim d(x[2].value() / all), h(heads), hkv(heads / groups);
  return {{x[0], h, x[1], d}, {x[0], hkv, x[1], d}, {x[0], hkv, x[1], d}};
}
Operands operands(InferCtx& ctx, size_t q, size_t k, size_t v) {
  if (ctx.node().attr_int("packed_heads", 0) > 0) return packed(ctx, ctx.shape(q));
  const std::vector<int64_t> f = sequence_major(ctx);
  return {heads_first(ctx, ctx.shape(q), f[0], "Q"), heads_first(ctx, ctx.shape(k), f[1], "K"),
          heads_first(ctx, ctx.shape(v), f[2], "V")};
}

// The batch dims of the three operands: Q's are the output's, K's and V's broadcast to them (their last one times
// kv_groups).
Shape attention_batch(InferCtx& ctx, const Operands& o) {
  const int64_t groups = ctx.node().attr_int("kv_groups", 1);
  if (groups < 1) ctx.fail("kv_groups " + std::to_string(groups) + " must be positive");
  const Shape &qs = o.q, &ks = o.k, &vs = o.v;
  if (qs.size() < 2 || ks.size() < 2 || vs.size() < 2)
    ctx.fail("Q, K and V must have rank >= 2, got " + shape_str(qs) + ", " + shape_str(ks) + " and " + shape_str(vs));
  const Dim &d = qs.back(), &dk = ks.back(), &tk = ks[ks.size() - 2], &tv = vs[vs.size() - 2];
  if (d.is_const() && dk.is_const() && d != dk)
    ctx.fail("Q " + shape_str(qs) + " and K " + shape_str(ks) + " differ in the head size");
  if (tk.is_const() && tv.is_const() && tk != tv)
    ctx.fail("K " + shape_str(ks) + " and V " + shape_str(vs) + " differ in the number of keys");
  Shape qb(qs.begin(), qs.end() - 2), kb(ks.begin(), ks.end() - 2), vb(vs.begin(), vs.end() - 2);
  if (kb.size() != vb.size()) ctx.fail("K " + shape_str(ks) + " and V " + shape_str(vs) + " differ in batch rank");
  if (groups > 1 && (kb.empty() || kb.size() != qb.size()))
    ctx.fail("kv_groups needs K " + shape_str(ks) + " with Q's batch rank " + shape_str(qs));
  if (groups > 1) kb.back() = kb.back() * Dim(groups), vb.back() = vb.back() * Dim(groups);
  for (size_t i = 0; i < kb.size(); ++i)
    if (kb[i].is_const() && vb[i].is_const() && kb[i] != vb[i])
      ctx.fail("K " + shape_str(ks) + " and V " + shape_str(vs) + " differ in batch dims");
  Shape batch = broadcast_shapes(ctx, qb, kb);
  if (batch.size() != qb.size()) ctx.fail("K " + shape_str(ks) + " has more batch dims than Q " + shape_str(qs));
  for (size_t i = 0; i < qb.size(); ++i)
    if (batch[i].is_const() && qb[i].is_const() && batch[i] != qb[i])
      ctx.fail("Q " + shape_str(qs) + " must hold every batch index of K " + shape_str(ks));
  return qb;
}

DType lse_dtype(DType q) { return q == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32; }

class FlashAttentionOp : public Op {
 public:
  explicit FlashAttentionOp(const ir::Node& n) : dropout_(has_dropout(n)) {}
  bool recomputable() const override { return true; }
  bool is_random() const override { return dropout_; }
  uint64_t host_inputs() const override { return input_bits({kRatio, kTraining}); }
  bool differentiable_output(size_t i) const override { return i == 0; }
  DType output_dtype(size_t i, const std::vector<DType>& in) const override {
    return i == 1 ? lse_dtype(in[0]) : in[0];
  }
  Dim flops(const ir::Node& n) const override {
    const ir::Value *q = n.input(kQ), *v = n.input(kV), *k = n.input(kK);
    if (!q) return Dim(0);
    if (const int64_t heads = n.attr_int("packed_heads", 0); heads > 0 && q->has_shape && q->shape.size() == 3) {
      const Dim& t = q->shape[1];  // (each head's scores by 4 d, its products, and 8 more)
      const int64_t groups = std::max<int64_t>(1, n.attr_int("kv_groups", 1));
      const Dim d = Dim::floor_div(q->shape[2], Dim(heads + 2 * heads / groups));
      return q->shape[0] * Dim(heads) * t * t * (Dim(4) * d + Dim(8));
    }
    if (!k || !v || !q->has_shape || !v->has_shape || !k->has_shape || k->shape.size() < 2) return Dim(0);
    const std::vector<int64_t> f = n.attr_ints("sequence_major", {0, 0, 0, 0});
    const bool keys_second = f.size() == 4 && f[1] && k->shape.size() == 4;  // K (B, Tk, H, d)
    const Dim& tk = k->shape[keys_second ? 1 : k->shape.size() - 2];
    Dim scores = shape_numel(Shape(q->shape.begin(), q->shape.end() - 1)) * tk;
    return scores * (Dim(2) * q->shape.back() + Dim(2) * v->shape.back() + Dim(8));
  }
  void infer(InferCtx& ctx) const override {
    const Operands o = operands(ctx, kQ, kK, kV);
    Shape batch = attention_batch(ctx, o);
    const Shape &qs = o.q, &vs = o.v;
    if (ctx.has(kCond) != ctx.has(kFill)) ctx.fail("cond and fill come together");
    if (ctx.has(kCond) && ctx.dtype(kCond) != DType::kBool) ctx.fail("cond must be bool");
    if (ctx.has(kCond) && ctx.rank(kCond) > int64_t(batch.size() + 2))
      ctx.fail("cond " + shape_str(ctx.shape(kCond)) + " has a higher rank than the scores");
    if (ctx.has(kBias) && ctx.rank(kBias) > int64_t(batch.size() + 2))
      ctx.fail("bias " + shape_str(ctx.shape(kBias)) + " has a higher rank than the scores");
    if (ctx.has(kBias) && ctx.dtype(kBias) != ctx.dtype(kQ)) ctx.fail("bias must have Q's dtype");
    Shape y = batch, lse = batch;
    y.push_back(qs[qs.size() - 2]);
    y.push_back(vs.back());
    lse.push_back(qs[qs.size() - 2]);
    if (sequence_major(ctx)[3] && y.size() != 4) ctx.fail("a sequence-major Y needs rank 4 operands");
    ctx.set(0, ctx.dtype(kQ), heads_first(ctx, y, sequence_major(ctx)[3], "Y"));  // (its own transpose)
    ctx.set(1, lse_dtype(ctx.dtype(kQ)), lse);
  }
  void grad(GradCtx& g) const override {
    if (!g.needs(kQ) && !g.needs(kK) && !g.needs(kV)) return;
    if (g.needs(kScale) || g.needs(kFill) || g.needs(kBias)) no_gradient(g);
    const ir::Node& n = g.node();
    std::vector<ir::Value*> in{g.dy(0), g.x(kQ), g.x(kK), g.x(kV), g.y(0), g.y(1)};
    for (size_t i = kScale; i <= kBias; ++i) in.push_back(g.x(i));
    while (!in.back()) in.pop_back();
    ir::Attributes attrs;
    for (const char* a : {"zero_masked_rows", "kv_groups", "sequence_major", "packed_heads"})
      if (n.attrs.count(a)) attrs[a] = n.attrs.at(a);
    const bool one = n.attr_int("packed_heads", 0) > 0;  // (dX)
    std::vector<ir::Value*> d = g.ops("FlashAttentionGrad", in, one ? 1 : 3, attrs, "com.onnxtrain");
    d[0]->producer->random_key = n.key();  // the forward's dropout mask
    for (size_t i = kQ; i <= (one ? kQ : kV); ++i)
      if (g.needs(i)) g.set_dx(i, d[i]);
  }

 private:
  bool dropout_;
};

class FlashAttentionGradOp : public Op {
 public:
  explicit FlashAttentionGradOp(const ir::Node& n) : dropout_(n.input(9) != nullptr) {}
  bool is_random() const override { return dropout_; }
  uint64_t host_inputs() const override { return input_bits({9, 10}); }
  DType output_dtype(size_t i, const std::vector<DType>& in) const override { return in[1 + i]; }
  void infer(InferCtx& ctx) const override {
    attention_batch(ctx, operands(ctx, 1, 2, 3));
    const size_t outputs = ctx.node().attr_int("packed_heads", 0) > 0 ? 1 : 3;  // (dX, or dQ, dK and dV)
    for (size_t i = 0; i < outputs; ++i) ctx.set(i, ctx.dtype(1 + i), ctx.shape(1 + i));
  }

 private:
  bool dropout_;
};

const bool kRegistered = register_ops({
    {"com.onnxtrain", "FlashAttention", factory<FlashAttentionOp>()},
    {"com.onnxtrain", "FlashAttentionGrad", factory<FlashAttentionGradOp>()},
});

}  // namespace
}  // namespace onnxtrain::ops
