// Cast and CastLike between every held dtype (float16/bfloat16 as storage).
#include <cmath>

#include "kernels/cpu/dispatch.h"
#include "ops/grad.h"
#include "ops/op.h"

namespace onnxtrain::ops {
namespace {

template <typename F>
void dispatch_any(DType t, const std::string& where, F&& fn) {
  if (t == DType::kFloat16) return fn(kernels::Tag<Half>{});
  if (t == DType::kBFloat16) return fn(kernels::Tag<BFloat16>{});
  kernels::dispatch<kernels::kAll>(t, where, fn);
}

template <typename From, typename To>
To convert(From v) {
  if constexpr (std::is_same_v<From, To>) return v;
  else if constexpr (std::is_same_v<To, bool>) return kernels::to_double(v) != 0;
  else if constexpr (std::is_integral_v<To> && !std::is_integral_v<From>) {
    double d = kernels::to_double(v);
    return std::isfinite(d) ? To(int64_t(d)) : To(0);
  } else if constexpr (std::is_integral_v<To> && std::is_integral_v<From>) return To(v);
  else return kernels::from_double<To>(kernels::to_double(v));
}

void cast_tensor(const Tensor& in, Tensor& out, const std::string& where) {
  dispatch_any(in.dtype(), where, [&](auto tf) {
    using From = typename decltype(tf)::type;
    dispatch_any(out.dtype(), where, [&](auto tt) {
      using To = typename decltype(tt)::type;
      const From* x = in.data<From>();
      To* y = out.data<To>();
      for (int64_t i = 0, n = in.numel(); i < n; ++i) y[i] = convert<From, To>(x[i]);
    });
  });
}

class CastOp : public Op {
 public:
  explicit CastOp(const ir::Node& n) {
    if (n.op_type == "CastLike") return;
    int64_t code = n.attr_int("to");
    to_ = dtype_from_onnx(int32_t(code));
    if (to_ == DType::kUndefined)
      throw UnsupportedError(n.where() + ": cast to ONNX dtype " + std::to_string(code) + " is not supported");
  }
  bool recomputable() const override { return true; }
  void infer(InferCtx& ctx) const override {
    DType to = to_ == DType::kUndefined ? ctx.dtype(1) : to_;
    if (ctx.dtype(0) == DType::kString || to == DType::kString) ctx.fail("string tensors are not supported");
    bool int_like = to == DType::kInt64 || to == DType::kInt32;
    ctx.set(0, to, ctx.shape(0), int_like ? ctx.value_opt(0) : std::nullopt);
  }
  void compute(ComputeCtx& c) const override { cast_tensor(c.in(0), c.out(0), c.node.where()); }
  DType output_dtype(size_t, const std::vector<DType>& in) const override {
    return to_ == DType::kUndefined ? in.at(1) : to_;
  }
  void grad(GradCtx& g) const override {  // back to the input's float type
    g.set_dx(0, g.op("Cast", {g.dy(0)}, {{"to", int64_t(g.x(0)->dtype)}}));
  }

 private:
  DType to_ = DType::kUndefined;  // CastLike: the second input's dtype
};
OT_REGISTER_OP("Cast", CastOp);
OT_REGISTER_OP("CastLike", CastOp);

}  // namespace
}  // namespace onnxtrain::ops
