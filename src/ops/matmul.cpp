// MatMul (NumPy semantics, batched with broadcasting) and Gemm.
#include <cstring>

#include "core/parallel.h"
#include "kernels/cpu/broadcast.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/small_gemm.h"
#include "ops/grad.h"
#include "ops/op.h"
#include "ops/shape_util.h"

namespace onnxtrain::ops {
namespace {

// MatMul, and com.onnxtrain.FusedMatMul(A, B, transA, transB) = MatMul(op(A), op(B)) with op a transposition
// of the last two dims where the flag is set: MatMul's gradients read their operands transposed without
// writing the transposes (two per batched product, a 4 MiB copy of attention's probabilities among them).
class MatMulOp : public Op {
 public:
  explicit MatMulOp(const ir::Node& n)
      : fused_(n.domain == "com.onnxtrain"), ta_(fused_ && n.attr_int("transA", 0)), tb_(fused_ && n.attr_int("transB", 0)) {}
  void grad(GradCtx& g) const override;
  bool recomputable() const override { return true; }
  Dim flops(const ir::Node& n) const override {  // 2 M N K per output of (..., M, N)
    const ir::Value *a = n.inputs[0], *y = n.outputs[0];
    if (!a->has_shape || !y->has_shape) return Op::flops(n);
    return Dim(2) * shape_numel(y->shape) * (ta_ ? a->shape[a->shape.size() - 2] : a->shape.back());
  }
  void infer(InferCtx& ctx) const override {
    Shape a = ctx.shape(0), b = ctx.shape(1);
    if (a.empty() || b.empty()) ctx.fail("inputs must have rank >= 1, got " + shape_str(a) + " and " + shape_str(b));
    if (fused_ && (a.size() < 2 || b.size() < 2)) ctx.fail("inputs must have rank >= 2, got " + shape_str(a) + " and " + shape_str(b));
    if (ta_) std::swap(a[a.size() - 1], a[a.size() - 2]);
    if (tb_) std::swap(b[b.size() - 1], b[b.size() - 2]);
    bool a1 = a.size() == 1, b1 = b.size() == 1;
    if (a1) a.insert(a.begin(), Dim(1));
    if (b1) b.push_back(Dim(1));
    const Dim &ka = a.back(), &kb = b[b.size() - 2];
    if (ka.is_const() && kb.is_const() && ka != kb)
      ctx.fail("inner dims differ: " + shape_str(ctx.shape(0)) + " x " + shape_str(ctx.shape(1)) + flags());
    Shape batch = broadcast_shapes(ctx, Shape(a.begin(), a.end() - 2), Shape(b.begin(), b.end() - 2));
    if (!a1) batch.push_back(a[a.size() - 2]);
    if (!b1) batch.push_back(b.back());
    ctx.set(0, ctx.dtype(0), batch);
  }
  void compute(ComputeCtx& c) const override {
    const Tensor &A = c.in(0), &B = c.in(1);
    std::vector<int64_t> ad = A.dims(), bd = B.dims();
    if (fused_ && (ad.size() < 2 || bd.size() < 2)) c.fail("inputs must have rank >= 2, got " + dims_str(ad) + " and " + dims_str(bd));
    if (ad.size() == 1) ad.insert(ad.begin(), 1);
    if (bd.size() == 1) bd.push_back(1);
    const size_t ra = ad.size(), rb = bd.size();
    int64_t m = ad[ra - 2 + ta_], k = ad[ra - 1 - ta_], n = bd[rb - 1 - tb_];
    if (bd[rb - 2 + tb_] != k) c.fail("inner dims differ: " + dims_str(A.dims()) + " x " + dims_str(B.dims()) + flags());
    std::vector<int64_t> ab(ad.begin(), ad.end() - 2), bb(bd.begin(), bd.end() - 2), batch;
    kernels::broadcast_dims(ab, bb, &batch);
    int64_t nb = numel_of(batch), na = numel_of(ab), nbb = numel_of(bb);
    const int64_t lda = ta_ ? m : k, ldb = tb_ ? k : n;
    kernels::dispatch<kernels::kNumeric>(A.dtype(), c.node.where(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* a = A.data<T>();
      const T* b = B.data<T>();
      T* o = c.out(0).data<T>();
      if (nbb == 1 && !ta_) {  // B shared by every batch: one GEMM over all rows of A
        if (na == nb) return kernels::gemm<T>(false, tb_, na * m, n, k, T(1), a, k, b, ldb, T(0), o, n);
      }
      auto sa = kernels::broadcast_strides(ab, batch), sb = kernels::broadcast_strides(bb, batch);
      const bool small = nb > 1 && m * n * k < (int64_t(1) << 22);
      auto one = [&](int64_t i) {
        auto [oa, ob] = kernels::broadcast_offsets<2>(i, batch, {&sa, &sb});
        const T *ai = a + oa * m * k, *bi = b + ob * k * n;
        if constexpr (std::is_floating_point_v<T>) {
          if (small) return kernels::small_gemm<T>(ta_, tb_, m, n, k, ai, bi, o + i * m * n);
        }
        kernels::gemm<T>(ta_, tb_, m, n, k, T(1), ai, lda, bi, ldb, T(0), o + i * m * n, n);
      };
      // Small GEMMs (attention heads): the batches in parallel, each GEMM on one thread (BLAS runs
      // single-threaded inside a parallel region); large ones: one after another, each on every thread.
      if (small) {
        parallel_for(nb, m * n * k, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) one(i);
        });
      } else {
        for (int64_t i = 0; i < nb; ++i) one(i);
      }
    });
  }

 private:
  std::string flags() const {
    return fused_ ? " (transA " + std::to_string(int(ta_)) + ", transB " + std::to_string(int(tb_)) + ")" : "";
  }
  bool fused_, ta_, tb_;
};
OT_REGISTER_OP("MatMul", MatMulOp);
const bool kFusedMatMulRegistered = register_op("com.onnxtrain", "FusedMatMul", factory<MatMulOp>());

class GemmOp : public Op {
 public:
  explicit GemmOp(const ir::Node& n)
      : alpha_(n.attr_float("alpha", 1)), beta_(n.attr_float("beta", 1)), ta_(n.attr_int("transA", 0)),
        tb_(n.attr_int("transB", 0)) {}
  void grad(GradCtx& g) const override;
  bool recomputable() const override { return true; }
  Dim flops(const ir::Node& n) const override {
    const ir::Value *a = n.inputs[0], *y = n.outputs[0];
    if (!a->has_shape || !y->has_shape) return Op::flops(n);
    return Dim(2) * shape_numel(y->shape) * (ta_ ? a->shape[0] : a->shape[1]);
  }
  void infer(InferCtx& ctx) const override {
    if (ctx.rank(0) != 2 || ctx.rank(1) != 2)
      ctx.fail("A and B must be 2-D, got " + shape_str(ctx.shape(0)) + " and " + shape_str(ctx.shape(1)));
    const Shape &a = ctx.shape(0), &b = ctx.shape(1);
    Dim m = ta_ ? a[1] : a[0], ka = ta_ ? a[0] : a[1], kb = tb_ ? b[1] : b[0], n = tb_ ? b[0] : b[1];
    if (ka.is_const() && kb.is_const() && ka != kb) ctx.fail("inner dims differ: " + shape_str(a) + " x " + shape_str(b));
    ctx.set(0, ctx.dtype(0), {m, n});
  }
  void compute(ComputeCtx& c) const override {
    const Tensor &A = c.in(0), &B = c.in(1);
    int64_t m = ta_ ? A.dims()[1] : A.dims()[0], k = ta_ ? A.dims()[0] : A.dims()[1];
    int64_t n = tb_ ? B.dims()[0] : B.dims()[1];
    Tensor& out = c.out(0);
    kernels::dispatch<kernels::kNumeric>(A.dtype(), c.node.where(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* o = out.data<T>();
      T beta = T(0);
      if (c.has(2) && beta_ != 0) {
        const Tensor& C = c.in(2);
        T bv = T(beta_);
        kernels::broadcast_apply<1, T>(o, out.dims(), {C.data<T>()}, {&C.dims()}, [bv](T x) { return T(bv * x); });
        beta = T(1);
      }
      kernels::gemm<T>(ta_, tb_, m, n, k, T(alpha_), A.data<T>(), A.dims()[1], B.data<T>(), B.dims()[1], beta, o, n);
    });
  }

 private:
  float alpha_, beta_;
  bool ta_, tb_;
};
OT_REGISTER_OP("Gemm", GemmOp);

using ir::Value;

// dA = dY B^T, dB = A^T dY. A 2-D B (a Linear layer) gets its gradient from one
// GEMM over all rows; broadcast batch dims are summed by the engine.
void MatMulOp::grad(GradCtx& g) const {
  Value *a = g.x(0), *b = g.x(1), *dy = g.dy(0);
  size_t ra = a->shape.size(), rb = b->shape.size();
  if (fused_) {  // Y = op(A) op(B)
    if (g.needs(0)) g.set_dx(0, ta_ ? g.matmul(b, tb_, dy, true) : g.matmul(dy, false, b, !tb_));
    if (g.needs(1)) g.set_dx(1, tb_ ? g.matmul(dy, true, a, ta_) : g.matmul(a, !ta_, dy, false));
    return;
  }
  if (ra == 1 || rb == 1) {  // vectors: view them as matrices
    Value* a2 = ra == 1 ? g.op("Unsqueeze", {a, g.ints({0})}) : a;
    Value* b2 = rb == 1 ? g.op("Unsqueeze", {b, g.ints({-1})}) : b;
    Value* dy2 = dy;
    if (ra == 1) dy2 = g.op("Unsqueeze", {dy2, g.ints({rb == 1 ? 0 : -2})});
    if (rb == 1) dy2 = g.op("Unsqueeze", {dy2, g.ints({-1})});
    auto swap = [&](Value* v) {
      std::vector<int64_t> perm(v->shape.size());
      for (size_t i = 0; i < perm.size(); ++i) perm[i] = int64_t(i);
      std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
      return g.op("Transpose", {v}, {{"perm", perm}});
    };
    if (g.needs(0)) g.set_dx(0, g.op("Reshape", {g.op("MatMul", {dy2, swap(b2)}), g.shape(a)}));
    if (g.needs(1)) {
      Value* db = g.op("MatMul", {swap(a2), dy2});
      if (rb == 1) db = g.op("ReduceSum", {db, g.ints({-1})}, {{"keepdims", int64_t(0)}});
      g.set_dx(1, rb == 1 && db->shape.size() > 1 ? db : g.op("Reshape", {db, g.shape(b)}));
    }
    return;
  }
  if (rb == 2) {
    // (rows, N) with rows = all leading dims of dY; N taken from dY's last dim.
    Value* dy2 = g.op("Reshape", {dy, g.op("Concat", {g.ints({-1}), g.op("Gather", {g.shape(dy), g.ints({-1})})}, {{"axis", int64_t(0)}})});
    if (g.needs(0)) {
      // B = Transpose(W) (a Linear layer as exporters write it): use W itself, so that
      // backward reads the parameter instead of keeping the transposed copy alive.
      const ir::Node* t = b->producer;
      bool of_weight = t && t->op_type == "Transpose" && t->inputs[0]->shape.size() == 2;
      Value* da = of_weight ? g.op("Gemm", {dy2, t->inputs[0]}) : g.op("Gemm", {dy2, b}, {{"transB", int64_t(1)}});
      g.set_dx(0, ra == 2 ? da : g.op("Reshape", {da, g.op("Concat", {g.op("Slice", {g.shape(dy), g.ints({0}), g.ints({-1})}), g.op("Gather", {g.shape(b), g.ints({0})})}, {{"axis", int64_t(0)}})}));
    }
    if (g.needs(1)) {
      Value* a2 = ra == 2 ? a : g.op("Reshape", {a, g.op("Concat", {g.ints({-1}), g.op("Gather", {g.shape(a), g.ints({-1})})}, {{"axis", int64_t(0)}})});
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
  ir::Attributes alpha = {{"alpha", alpha_}};
  auto with = [&](int64_t ta, int64_t tb) {
    ir::Attributes at = alpha;
    at["transA"] = ta;
    at["transB"] = tb;
    return at;
  };
  if (g.needs(0)) g.set_dx(0, ta_ ? g.op("Gemm", {b, dy}, with(tb_, 1)) : g.op("Gemm", {dy, b}, with(0, !tb_)));
  if (g.needs(1)) g.set_dx(1, tb_ ? g.op("Gemm", {dy, a}, with(1, ta_)) : g.op("Gemm", {a, dy}, with(!ta_, 0)));
  if (g.needs(2)) g.set_dx(2, beta_ == 1.0f ? dy : g.mul(dy, g.like(beta_, dy)));
}

}  // namespace
}  // namespace onnxtrain::ops
