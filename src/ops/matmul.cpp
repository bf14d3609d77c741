// MatMul (NumPy semantics, batched with broadcasting) and Gemm.
#include "ops/matmul.h"

#include "ops/grad.h"
#include "ops/op.h"
#include "ops/shape_util.h"

namespace onnxtrain::ops {

DType product_output_dtype(const ir::Node& n) {
  if (!n.attrs.count("to")) return DType::kUndefined;
  if (n.attr_int("to") != int64_t(DType::kFloat32))
    throw ModelError(n.where() + ": attribute 'to' must be 1 (float32), got " + std::to_string(n.attr_int("to")));
  return DType::kFloat32;
}

DType product_dtype(InferCtx& ctx, DType to) {
  if (to == DType::kUndefined) return ctx.dtype(0);
  if (ctx.dtype(0) != DType::kBFloat16 && ctx.dtype(0) != DType::kFloat16)
    ctx.fail("a float32 output ('to') needs 16-bit float inputs, got " + dtype_name(ctx.dtype(0)));
  return to;
}

namespace {

// MatMul, and com.onnxtrain.FusedMatMul(A, B, transA, transB) = MatMul(op(A), op(B)) with op a transposition
// of the last two dims where the flag is set: MatMul's gradients read their operands transposed without
// writing the transposes (two per batched product, a 4 MiB copy of attention's probabilities among them).
MatMulAttrs matmul_attrs(const ir::Node& n) {
  bool fused = n.domain == "com.onnxtrain";
  return {fused, fused && n.attr_int("transA", 0), fused && n.attr_int("transB", 0),
          fused ? product_output_dtype(n) : DType::kUndefined};
}

class MatMulOp : public OpWith<MatMulAttrs> {
 public:
  explicit MatMulOp(const ir::Node& n) : OpWith(matmul_attrs(n)) {}
  void grad(GradCtx& g) const override;
  bool recomputable() const override { return true; }
  Dim flops(const ir::Node& n) const override {  // 2 M N K per output of (..., M, N)
    const ir::Value *a = n.inputs[0], *y = n.outputs[0];
    if (!a->has_shape || !y->has_shape) return Op::flops(n);
    return Dim(2) * shape_numel(y->shape) * (attrs.ta ? a->shape[a->shape.size() - 2] : a->shape.back());
  }
  void infer(InferCtx& ctx) const override {
    Shape a = ctx.shape(0), b = ctx.shape(1);
    if (a.empty() || b.empty()) ctx.fail("inputs must have rank >= 1, got " + shape_str(a) + " and " + shape_str(b));
    if (attrs.fused && (a.size() < 2 || b.size() < 2))
      ctx.fail("inputs must have rank >= 2, got " + shape_str(a) + " and " + shape_str(b));
    if (attrs.ta) std::swap(a[a.size() - 1], a[a.size() - 2]);
    if (attrs.tb) std::swap(b[b.size() - 1], b[b.size() - 2]);
    bool a1 = a.size() == 1, b1 = b.size() == 1;
    if (a1) a.insert(a.begin(), Dim(1));
    if (b1) b.push_back(Dim(1));
    const Dim &ka = a.back(), &kb = b[b.size() - 2];
    if (ka.is_const() && kb.is_const() && ka != kb)
      ctx.fail("inner dims differ: " + shape_str(ctx.shape(0)) + " x " + shape_str(ctx.shape(1)) + attrs.flags());
    Shape batch = broadcast_shapes(ctx, Shape(a.begin(), a.end() - 2), Shape(b.begin(), b.end() - 2));
    if (!a1) batch.push_back(a[a.size() - 2]);
    if (!b1) batch.push_back(b.back());
    ctx.set(0, product_dtype(ctx, attrs.to), batch);
  }
  DType output_dtype(size_t, const std::vector<DType>& in) const override {
    return product_dtype(attrs.to, in[0]);
  }
};

class GemmOp : public OpWith<GemmAttrs> {
 public:
  explicit GemmOp(const ir::Node& n)
      : OpWith({n.attr_float("alpha", 1), n.attr_float("beta", 1), n.attr_int("transA", 0) != 0,
                n.attr_int("transB", 0) != 0}) {}
  void grad(GradCtx& g) const override;
  bool recomputable() const override { return true; }
  Dim flops(const ir::Node& n) const override {
    const ir::Value *a = n.inputs[0], *y = n.outputs[0];
    if (!a->has_shape || !y->has_shape) return Op::flops(n);
    return Dim(2) * shape_numel(y->shape) * (attrs.ta ? a->shape[0] : a->shape[1]);
  }
  void infer(InferCtx& ctx) const override {
    if (ctx.rank(0) != 2 || ctx.rank(1) != 2)
      ctx.fail("A and B must be 2-D, got " + shape_str(ctx.shape(0)) + " and " + shape_str(ctx.shape(1)));
    const Shape &a = ctx.shape(0), &b = ctx.shape(1);
    Dim m = attrs.ta ? a[1] : a[0], ka = attrs.ta ? a[0] : a[1], kb = attrs.tb ? b[1] : b[0],
        n = attrs.tb ? b[0] : b[1];
    if (ka.is_const() && kb.is_const() && ka != kb)
      ctx.fail("inner dims differ: " + shape_str(a) + " x " + shape_str(b));
    Shape out{m, n};
    if (ctx.has(2)) {  // C broadcasts to (M, N) one way
      const Shape& c = ctx.shape(2);
      bool fits = c.size() <= 2;
      for (size_t i = 0; fits && i < c.size(); ++i) {
        const Dim &d = c[i], &o = out[2 - c.size() + i];
        fits = !d.is_const() || !o.is_const() || d.value() == 1 || d == o;
      }
      if (!fits) ctx.fail("C " + shape_str(c) + " does not broadcast to " + shape_str(out));
    }
    ctx.set(0, ctx.dtype(0), out);
  }
};

const bool kRegistered = register_ops({
    {"", "MatMul", factory<MatMulOp>()},
    {"com.onnxtrain", "FusedMatMul", factory<MatMulOp>()},
    {"", "Gemm", factory<GemmOp>()},
});

using ir::Value;

// dA = dY B^T, dB = A^T dY. A 2-D B (a Linear layer) gets its gradient from one
// GEMM over all rows; broadcast batch dims are summed by the engine.
void MatMulOp::grad(GradCtx& g) const {
  Value *a = g.x(0), *b = g.x(1), *dy = g.dy(0);
  size_t ra = a->shape.size(), rb = b->shape.size();
  if (attrs.fused) {  // Y = op(A) op(B)
    if (dy->dtype != a->dtype) dy = g.cast(dy, a->dtype);  // (a float32 output: the Cast's gradient it absorbed)
    if (g.needs(0)) g.set_dx(0, attrs.ta ? g.matmul(b, attrs.tb, dy, true) : g.matmul(dy, false, b, !attrs.tb));
    if (g.needs(1)) g.set_dx(1, attrs.tb ? g.matmul(dy, true, a, attrs.ta) : g.matmul(a, !attrs.ta, dy, false));
    return;
  }
  if (ra == 1 || rb == 1) {  // vectors: view them as matrices
    Value* a2 = ra == 1 ? g.unsqueeze(a, {0}) : a;
    Value* b2 = rb == 1 ? g.unsqueeze(b, {-1}) : b;
    Value* dy2 = dy;
    if (ra == 1) dy2 = g.unsqueeze(dy2, {rb == 1 ? 0 : -2});
    if (rb == 1) dy2 = g.unsqueeze(dy2, {-1});
    auto swap = [&](Value* v) {
      std::vector<int64_t> perm(v->shape.size());
      for (size_t i = 0; i < perm.size(); ++i) perm[i] = int64_t(i);
      std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
      return g.op("Transpose", {v}, {{"perm", perm}});
    };
    if (g.needs(0)) g.set_dx(0, g.reshape(g.op("MatMul", {dy2, swap(b2)}), g.shape(a)));
    if (g.needs(1)) {
      Value* db = g.op("MatMul", {swap(a2), dy2});
      if (rb == 1) db = g.reduce_sum(db, {-1}, false);
      g.set_dx(1, rb == 1 && db->shape.size() > 1 ? db : g.reshape(db, g.shape(b)));
    }
    return;
  }
  if (rb == 2) {
    // (rows, N) with rows = all leading dims of dY; N taken from dY's last dim.
    Value* dy2 = g.reshape(dy, g.concat({g.ints({-1}), g.gather(g.shape(dy), g.ints({-1}))}, 0));
    if (g.needs(0)) {
      // B = Transpose(W) (a Linear layer as exporters write it): use W itself, so that
      // backward reads the parameter instead of keeping the transposed copy alive.
      const ir::Node* t = b->producer;
      bool of_weight = t && t->op_type == "Transpose" && t->inputs[0]->shape.size() == 2;
      Value* da = of_weight ? g.op("Gemm", {dy2, t->inputs[0]}) : g.op("Gemm", {dy2, b}, {{"transB", int64_t(1)}});
      g.set_dx(0, ra == 2 ? da
                          : g.reshape(da, g.concat({g.op("Slice", {g.shape(dy), g.ints({0}), g.ints({-1})}),
                                                    g.gather(g.shape(b), g.ints({0}))},
                                                   0)));
    }
    if (g.needs(1)) {
      Value* a2 = ra == 2 ? a : g.reshape(a, g.concat({g.ints({-1}), g.gather(g.shape(a), g.ints({-1}))}, 0));
      g.set_dx(1, g.op("Gemm", {a2, dy2}, {{"transA", int64_t(1)}}));
    }
    return;
  }
  if (g.needs(0)) g.set_dx(0, g.matmul(dy, false, b, true));  // dY B^T
  if (g.needs(1)) g.set_dx(1, g.matmul(a, true, dy, false));  // A^T dY
}

// Y = alpha op(A) op(B) + beta C, each transposition handled by Gemm's own flags.
void GemmOp::grad(GradCtx& g) const {
  Value *a = g.x(0), *b = g.x(1), *dy = g.dy(0);
  ir::Attributes alpha = {{"alpha", attrs.alpha}};
  auto with = [&](int64_t ta, int64_t tb) {
    ir::Attributes at = alpha;
    at["transA"] = ta;
    at["transB"] = tb;
    return at;
  };
  if (g.needs(0))
    g.set_dx(0, attrs.ta ? g.op("Gemm", {b, dy}, with(attrs.tb, 1)) : g.op("Gemm", {dy, b}, with(0, !attrs.tb)));
  if (g.needs(1))
    g.set_dx(1, attrs.tb ? g.op("Gemm", {dy, a}, with(1, attrs.ta)) : g.op("Gemm", {a, dy}, with(!attrs.ta, 0)));
  if (g.needs(2)) g.set_dx(2, attrs.beta == 1.0f ? dy : g.mul(dy, g.like(attrs.beta, dy)));
}

}  // namespace
}  // namespace onnxtrain::ops
