// Dropout: identity in inference; in training mode a counter-based random mask
// (element i keeps when hash(seed, i) >= ratio), so rerunning with the same seed
// gives a bit-identical mask whatever the threading.
#include <cstring>

#include "core/parallel.h"
#include "kernels/cpu/dispatch.h"
#include "ops/grad.h"
#include "ops/op.h"

namespace onnxtrain::ops {
namespace {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

class DropoutOp : public Op {
 public:
  explicit DropoutOp(const ir::Node& n)
      : ratio_attr_(n.attr_float("ratio", 0.5f)), seed_attr_(n.attr_int("seed", 0)), has_seed_(n.has_attr("seed")),
        legacy_(n.opset > 0 && n.opset < 12) {}
  void infer(InferCtx& ctx) const override {
    ctx.set(0, ctx.dtype(0), ctx.shape(0));
    ctx.set(1, DType::kBool, ctx.shape(0));
  }
  void compute(ComputeCtx& c) const override {
    const Tensor& x = c.in(0);
    bool training = !legacy_ && c.has(2) && c.in(2).to_int64()[0] != 0;
    float ratio = legacy_ ? ratio_attr_ : (c.has(1) ? float(c.in(1).to_double()[0]) : 0.5f);
    if (training && (ratio < 0 || ratio >= 1)) c.fail("ratio " + std::to_string(ratio) + " must be in [0, 1)");
    int64_t n = x.numel();
    bool* mask = c.wants(1) ? c.out(1).data<bool>() : nullptr;
    if (!training || ratio == 0) {
      if (c.out(0).raw() != x.raw()) std::memcpy(c.out(0).raw(), x.raw(), x.nbytes());
      if (mask) std::memset(mask, 1, size_t(n));
      return;
    }
    uint64_t seed = has_seed_ ? uint64_t(seed_attr_) : c.seed;
    // Keep when the top 24 bits of the hash, as a fraction, reach the ratio.
    const uint32_t threshold = uint32_t(double(ratio) * double(1 << 24));
    kernels::dispatch<kernels::kFloats>(x.dtype(), c.node.where(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* xp = x.data<T>();
      T* y = c.out(0).data<T>();
      T scale = T(1.0 / (1.0 - double(ratio)));
      parallel_for(n, 4, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          bool keep = uint32_t(splitmix64(seed ^ splitmix64(uint64_t(i))) >> 40) >= threshold;
          y[i] = keep ? xp[i] * scale : T(0);
          if (mask) mask[i] = keep;
        }
      });
    });
  }
  int inplace_input() const override { return 0; }
  bool is_random() const override { return true; }
  bool recomputable() const override { return true; }
  bool differentiable_output(size_t i) const override { return i == 0; }
  DType output_dtype(size_t i, const std::vector<DType>& in) const override { return i == 1 ? DType::kBool : in[0]; }
  void grad(GradCtx& g) const override {  // dy * mask / (1 - ratio) in training mode, dy otherwise
    ir::Value *dy = g.dy(0), *training = g.x(2);
    if (legacy_ || !training) return g.set_dx(0, dy);
    ir::Value* ratio = g.x(1) ? g.op("Cast", {g.x(1)}, {{"to", int64_t(dy->dtype)}}) : g.like(0.5, dy);
    ir::Value* scale = g.div(g.like(1, dy), g.sub(g.like(1, dy), ratio));
    ir::Value* kept = g.mul(g.where_or_zero(g.y(1), dy), scale);
    g.set_dx(0, g.op("Where", {training, kept, dy}));
  }

 private:
  float ratio_attr_;
  int64_t seed_attr_;
  bool has_seed_, legacy_;
};
OT_REGISTER_OP("Dropout", DropoutOp);

}  // namespace
}  // namespace onnxtrain::ops
