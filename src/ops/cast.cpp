// Cast and CastLike between every held dtype (float16/bfloat16 as storage).
#include "onnxtrain/error.h"
#include "ops/grad.h"
#include "ops/op.h"

namespace onnxtrain::ops {
namespace {

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
    bool int_like = to == DType::kInt64 || to == DType::kInt32;
    ctx.set(0, to, ctx.shape(0), int_like ? ctx.propagated_opt(0) : std::nullopt);
  }
  DType output_dtype(size_t, const std::vector<DType>& in) const override {
    return to_ == DType::kUndefined ? in.at(1) : to_;
  }
  void grad(GradCtx& g) const override {  // back to the input's float type
    g.set_dx(0, g.cast(g.dy(0), g.x(0)->dtype));
  }

 private:
  DType to_ = DType::kUndefined;  // CastLike: the second input's dtype
};
const bool kRegistered = register_ops({{"", "Cast", factory<CastOp>()}, {"", "CastLike", factory<CastOp>()}});

}  // namespace
}  // namespace onnxtrain::ops
