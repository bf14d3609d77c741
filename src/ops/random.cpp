// Random ops: RandomUniform, RandomNormal (a shape attribute), RandomUniformLike, RandomNormalLike (the input's
// shape) and Bernoulli (a draw per probability of the input). They draw counter-based numbers from the run's seed
// and the node's key, as Dropout does (kernels/counter_random.h): a rerun with the same seed, a recomputed clone
// among them, draws bit-identical numbers. No gradient flows through them.
#include "ops/random.h"

#include <cmath>
#include <string>

#include "onnxtrain/error.h"
#include "ops/op.h"

namespace onnxtrain::ops {
namespace {

RandomAttrs read(const ir::Node& n, RandomAttrs::Kind kind, DType dflt) {
  bool uniform = kind == RandomAttrs::kUniform;
  float a = n.attr_float(uniform ? "low" : "mean", 0.f), b = n.attr_float(uniform ? "high" : "scale", 1.f);
  DType dtype = n.has_attr("dtype") ? dtype_from_onnx(int32_t(n.attr_int("dtype"))) : dflt;
  // (ONNX's seed is a float: its integer part seeds the node)
  const float seed = n.attr_float("seed", 0.f);
  if (!(std::fabs(seed) < 9.2e18f))
    throw ModelError(n.where() + ": seed " + std::to_string(seed) + " is not a finite number within int64's range");
  return {kind, a, b, int64_t(seed), n.has_attr("seed"), dtype};
}

class RandomOp : public OpWith<RandomAttrs> {
 public:
  using OpWith::OpWith;
  bool is_random() const override { return true; }
  bool recomputable() const override { return true; }
  bool differentiable_output(size_t) const override { return false; }
  DType output_dtype(size_t, const std::vector<DType>& in) const override {
    return attrs.dtype != DType::kUndefined ? attrs.dtype : in.empty() ? DType::kFloat32 : in[0];
  }
};

// RandomUniform, RandomNormal: the output's shape from the `shape` attribute (float32 by default).
class RandomOfShapeOp : public RandomOp {
 public:
  RandomOfShapeOp(const ir::Node& n, RandomAttrs::Kind kind)
      : RandomOp(read(n, kind, DType::kFloat32)), shape_(n.attr_ints("shape")) {
    if (!n.has_attr("shape")) throw ShapeError(n.where() + ": the shape attribute is required");
  }
  void infer(InferCtx& ctx) const override {
    Shape s;
    for (int64_t d : shape_) {
      if (d < 0) ctx.fail("shape has a negative dim " + std::to_string(d));
      s.push_back(Dim(d));
    }
    ctx.set(0, attrs.dtype, s);
  }

 private:
  std::vector<int64_t> shape_;
};

// RandomUniformLike, RandomNormalLike, Bernoulli: the input's shape (and its dtype unless `dtype` says).
class RandomLikeOp : public RandomOp {
 public:
  RandomLikeOp(const ir::Node& n, RandomAttrs::Kind kind) : RandomOp(read(n, kind, DType::kUndefined)) {}
  void infer(InferCtx& ctx) const override {
    if (attrs.kind == RandomAttrs::kBernoulli && !dtype_is_float(ctx.dtype(0)))
      ctx.fail("Bernoulli's probabilities are " + dtype_name(ctx.dtype(0)) + ", not a floating type");
    ctx.set(0, attrs.dtype != DType::kUndefined ? attrs.dtype : ctx.dtype(0), ctx.shape(0));
  }
};

template <RandomAttrs::Kind K>
OpFactory of_shape() {
  return [](const ir::Node& n) -> std::shared_ptr<const Op> { return std::make_shared<RandomOfShapeOp>(n, K); };
}
template <RandomAttrs::Kind K>
OpFactory like() {
  return [](const ir::Node& n) -> std::shared_ptr<const Op> { return std::make_shared<RandomLikeOp>(n, K); };
}

const bool kRegistered = register_ops({{"", "RandomUniform", of_shape<RandomAttrs::kUniform>()},
                                       {"", "RandomNormal", of_shape<RandomAttrs::kNormal>()},
                                       {"", "RandomUniformLike", like<RandomAttrs::kUniform>()},
                                       {"", "RandomNormalLike", like<RandomAttrs::kNormal>()},
                                       {"", "Bernoulli", like<RandomAttrs::kBernoulli>()}});

}  // namespace
}  // namespace onnxtrain::ops
