// Dropout: identity in inference; in training mode a counter-based random mask (kernels/cpu/dropout.cpp), so
// rerunning with the same seed gives a bit-identical mask.
#include "ops/dropout.h"

#include "ops/grad.h"
#include "ops/op.h"

namespace onnxtrain::ops {
namespace {

class DropoutOp : public OpWith<DropoutAttrs> {
 public:
  explicit DropoutOp(const ir::Node& n)
      : OpWith({n.attr_float("ratio", 0.5f), n.attr_int("seed", 0), n.has_attr("seed"), n.opset > 0 && n.opset < 12}) {}
  void infer(InferCtx& ctx) const override {
    ctx.set(0, ctx.dtype(0), ctx.shape(0));
    ctx.set(1, DType::kBool, ctx.shape(0));
  }
  int inplace_input() const override { return 0; }
  uint64_t host_inputs() const override { return input_bits({1, 2}); }  // the kernel reads ratio and training_mode
  bool is_random() const override { return true; }
  bool recomputable() const override { return true; }
  bool differentiable_output(size_t i) const override { return i == 0; }
  DType output_dtype(size_t i, const std::vector<DType>& in) const override { return i == 1 ? DType::kBool : in[0]; }
  void grad(GradCtx& g) const override {  // dy * mask / (1 - ratio) in training mode, dy otherwise
    ir::Value *dy = g.dy(0), *training = g.x(2);
    if (attrs.legacy || !training) return g.set_dx(0, dy);
    ir::Value* ratio = g.x(1) ? g.cast(g.x(1), dy->dtype) : g.like(0.5, dy);
    ir::Value* scale = g.div(g.like(1, dy), g.sub(g.like(1, dy), ratio));
    ir::Value* kept = g.mul(g.where_or_zero(g.y(1), dy), scale);
    g.set_dx(0, g.where(training, kept, dy));
  }
};
const bool kRegistered = register_ops({{"", "Dropout", factory<DropoutOp>()}});

}  // namespace
}  // namespace onnxtrain::ops
