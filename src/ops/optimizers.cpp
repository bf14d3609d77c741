// ONNX's training optimizers (domain ai.onnx.preview.training): Adam, Adagrad,
// Momentum. Each updates any number of tensors: inputs R, T, then per tensor
// group X..., G..., state...; outputs the new X... and state....
#include "ops/optimizers.h"

#include "onnxtrain/error.h"
#include "ops/op.h"

namespace onnxtrain::ops {
namespace {

constexpr const char* kDomain = "ai.onnx.preview.training";

OptimizerAttrs optimizer_attrs(const ir::Node& n) {
  OptimizerAttrs a;
  a.groups = n.op_type == "Adam" ? 4 : 3;
  if ((n.inputs.size() - 2) % size_t(a.groups) != 0)
    throw ModelError(n.where() + ": expected R, T and " + std::to_string(a.groups) + " equal groups of tensors");
  bool adam = n.op_type == "Adam";
  a.alpha = n.op_type == "Momentum" ? n.attr_float("alpha") : n.attr_float("alpha", 0.9f);
  a.beta = n.op_type == "Momentum" ? n.attr_float("beta") : n.attr_float("beta", 0.999f);
  a.l2 = n.op_type == "Momentum" ? n.attr_float("norm_coefficient") : n.attr_float("norm_coefficient", 0);
  a.epsilon = n.attr_float("epsilon", 1e-6f);
  a.decay = n.attr_float("decay_factor", 0);
  a.post = adam ? n.attr_float("norm_coefficient_post", 0) : 0;
  a.nesterov = n.attr_string("mode", "standard") == "nesterov";
  return a;
}

// Inputs R, T, then the groups (X..., G..., state...); outputs X_new... and state_new....
class OptimizerOp : public OpWith<OptimizerAttrs> {
 public:
  explicit OptimizerOp(const ir::Node& n) : OpWith(optimizer_attrs(n)) {}
  void infer(InferCtx& ctx) const override {
    size_t n = attrs.count(ctx.num_inputs());
    for (size_t k = 0; k < ctx.num_outputs(); ++k) {
      size_t src = 2 + (k < n ? k : n * 2 + (k - n));  // X_new like X; state_new like state
      ctx.set(k, ctx.dtype(src), ctx.shape(src));
    }
  }
};

const bool kRegistered = register_ops({
    {kDomain, "Momentum", factory<OptimizerOp>()},
    {kDomain, "Adagrad", factory<OptimizerOp>()},
    {kDomain, "Adam", factory<OptimizerOp>()},
});

}  // namespace
}  // namespace onnxtrain::ops
