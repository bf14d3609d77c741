#include "ops/shape_util.h"

#include "onnxtrain/error.h"

namespace onnxtrain::ops {

Shape broadcast_shapes(InferCtx& ctx, const Shape& a, const Shape& b) {
  size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    Dim x = i < r - a.size() ? Dim(1) : a[i - (r - a.size())];
    Dim y = i < r - b.size() ? Dim(1) : b[i - (r - b.size())];
    if (x == y || y == Dim(1)) out[i] = x;
    else if (x == Dim(1)) out[i] = y;
    else if (x.is_const() && y.is_const())
      ctx.fail("cannot broadcast shapes " + shape_str(a) + " and " + shape_str(b));
    else if (x.is_const()) out[i] = x;  // the symbol must be 1 or equal
    else if (y.is_const()) out[i] = y;
    else out[i] = Dim::max(x, y);  // exact: valid broadcasting makes one of them 1 or both equal
  }
  return out;
}

Shape shape_of(const Tensor& t) { return const_shape(t.dims()); }

std::vector<int64_t> concrete(const ir::Node& node, const Shape& s) {
  std::vector<int64_t> r;
  for (auto& d : s) {
    if (!d.is_const()) throw ShapeError(node.where() + ": output dim " + d.str() + " is not known at run time");
    if (d.value() < 0) throw ShapeError(node.where() + ": negative output dim in " + shape_str(s));
    r.push_back(d.value());
  }
  return r;
}

void infer_broadcast(InferCtx& ctx, DType out_dtype) {
  Shape s = ctx.shape(0);
  for (size_t i = 1; i < ctx.num_inputs(); ++i)
    if (ctx.has(i)) s = broadcast_shapes(ctx, s, ctx.shape(i));
  ctx.set(0, out_dtype, s);
}

}  // namespace onnxtrain::ops
