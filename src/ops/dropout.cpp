// Dropout: identity in inference; in training mode a counter-based random mask (kernels/cpu/dropout.cpp), so
// rerunning with the same seed gives a bit-identical mask. com.onnxtrain.Dropout is the same with attribute `to`, the
// output's dtype: the mask applied in the input's (16-bit) dtype, then widened to float32, as a Cast after it would
// (dropout_fusion.cpp makes it where autocast casts a Dropout's output); com.onnxtrain.DropoutGrad takes `to`
// the other way: dy (float32) rounded to the 16-bit `to` first, then the mask applied, as a Cast before it would.
// com.onnxtrain.Dropout's optional input 3, a residual of the output's dtype and shape, is added to the output (the
// residual stream a dropout joins: dropout_fusion.cpp), into the residual's buffer where it dies there.
#include "ops/dropout.h"

#include "ops/grad.h"
#include "ops/op.h"
#include "ops/shape_util.h"

namespace onnxtrain::ops {
namespace {

bool is_16bit_beside_float32(DType a, DType b) {
  return (a == DType::kFloat32 && dtype_is_16bit_float(b)) || (b == DType::kFloat32 && dtype_is_16bit_float(a));
}

}  // namespace

DType dropout_output_dtype(int64_t to, DType x, InferCtx& ctx) {
  const DType y = to ? DType(to) : x;
  if (y != x && !is_16bit_beside_float32(x, y))
    ctx.fail("attribute to (" + std::to_string(to) + ") with an input of " + dtype_name(x) +
             ": the output must be of the input's dtype, or a float32 and a 16-bit float the one beside the other");
  return y;
}

namespace {

class DropoutOp : public OpWith<DropoutAttrs> {
 public:
  explicit DropoutOp(const ir::Node& n)
      : OpWith({n.attr_float("ratio", 0.5f), n.attr_int("seed", 0), n.has_attr("seed"),
                n.domain.empty() && n.opset > 0 && n.opset < 12}),
        to_(n.attr_int("to", 0)), residual_(n.input(3) != nullptr) {}
  void infer(InferCtx& ctx) const override {
    const DType y = dropout_output_dtype(to_, ctx.dtype(0), ctx);
    if (ctx.has(3) && (ctx.dtype(3) != y || ctx.shape(3) != ctx.shape(0)))
      ctx.fail("the residual " + dtype_name(ctx.dtype(3)) + " " + shape_str(ctx.shape(3)) + " must be the output's " +
               dtype_name(y) + " " + shape_str(ctx.shape(0)));
    ctx.set(0, y, ctx.shape(0));
    ctx.set(1, DType::kBool, ctx.shape(0));
  }
  int inplace_input() const override { return residual_ ? 3 : 0; }
  uint64_t host_inputs() const override { return input_bits({1, 2}); }  // the kernel reads ratio and training_mode
  bool is_random() const override { return true; }
  bool recomputable() const override { return true; }
  bool differentiable_output(size_t i) const override { return i == 0; }
  DType output_dtype(size_t i, const std::vector<DType>& in) const override {
    return i == 1 ? DType::kBool : to_ ? DType(to_) : in[0];
  }
  // dy * mask / (1 - ratio) in training mode, dy otherwise: com.onnxtrain.DropoutGrad draws the forward's mask
  // again (its key and seed), so the mask is never stashed.
  void grad(GradCtx& g) const override {
    ir::Value *dy = g.dy(0), *training = g.x(2);
    if (residual_) g.set_dx(3, dy);
    if (!to_ && (attrs.legacy || !training)) return g.set_dx(0, dy);
    ir::Attributes a;
    if (attrs.has_seed) a["seed"] = attrs.seed;
    if (to_) a["to"] = int64_t(g.x(0)->dtype);  // (dy in the output's dtype, dx in the input's)
    std::vector<ir::Value*> dx = g.ops("DropoutGrad", {dy, g.x(1), training}, 1, a, "com.onnxtrain");
    dx[0]->producer->random_key = g.node().key();
    g.set_dx(0, dx[0]);
  }

 private:
  int64_t to_;
  bool residual_;
};

// com.onnxtrain.DropoutGrad(dy, ratio, training_mode) -> dx: dy scaled where the Dropout of the same key kept its
// element, 0 where it dropped it; dy itself outside training mode (in the dtype `to` where given).
class DropoutGradOp : public OpWith<DropoutAttrs> {
 public:
  explicit DropoutGradOp(const ir::Node& n)
      : OpWith({0.5f, n.attr_int("seed", 0), n.has_attr("seed"), false}), to_(n.attr_int("to", 0)) {}
  void infer(InferCtx& ctx) const override {
    ctx.set(0, dropout_output_dtype(to_, ctx.dtype(0), ctx), ctx.shape(0));
  }
  int inplace_input() const override { return 0; }
  uint64_t host_inputs() const override { return input_bits({1, 2}); }
  bool is_random() const override { return true; }

 private:
  int64_t to_;
};

const bool kRegistered = register_ops({{"", "Dropout", factory<DropoutOp>()},
                                       {"com.onnxtrain", "Dropout", factory<DropoutOp>()},
                                       {"com.onnxtrain", "DropoutGrad", factory<DropoutGradOp>()}});

}  // namespace
}  // namespace onnxtrain::ops
