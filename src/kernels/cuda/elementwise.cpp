// The CUDA kernels of the elementwise ops: unary and binary arithmetic, comparisons, GELU's gradient, Where, Cast,
// Dropout, ConstantOfShape and Range (the launchers are elementwise.cu's).
#include <cstring>

#include "kernels/cuda/indexing.h"
#include "kernels/dropout_mode.h"
#include "kernels/strides.h"
#include "ops/dropout.h"
#include "ops/elementwise.h"
#include "ops/op.h"
#include "ops/shape_ops.h"

namespace onnxtrain::kernels::cuda {
namespace {

KernelDef unary_def(const char* name, Unary op) {
  return {"", name, [op](const ops::Op&, KernelCtx& c) {
            cuda::unary(op, c.in(0).dtype(), c.in(0).raw(), c.out(0).raw(), c.in(0).numel(), stream());
          }};
}

void gelu(const ops::UnaryAttrs& a, KernelCtx& c) {
  cuda::unary(a.tanh_approx ? Unary::kGeluTanh : Unary::kGelu, c.in(0).dtype(), c.in(0).raw(), c.out(0).raw(),
              c.in(0).numel(), stream());
}

void gelu_grad(const ops::UnaryAttrs& a, KernelCtx& c) {
  const Tensor &dy = c.in(0), &x = c.in(1);
  if (dy.dims() != x.dims() || dy.dtype() != x.dtype())
    c.fail("dy " + dims_str(dy.dims()) + " and x " + dims_str(x.dims()) + " differ in shape or dtype");
  const auto st = contiguous_strides(x.dims());
  cuda::binary(a.tanh_approx ? Binary::kGeluTanhGrad : Binary::kGeluGrad, x.dtype(), dy.raw(), x.raw(),
               c.out(0).raw(), indexing(c, x.dims(), {st, st}), stream());
}

// com.onnxtrain.GeluAndGrad(dy, x) = (GeluGrad(dy, x), Gelu(x)) in one pass (dx may be dy's buffer and y x's).
void gelu_and_grad(const ops::UnaryAttrs& a, KernelCtx& c) {
  const Tensor &dy = c.in(0), &x = c.in(1);
  if (dy.dims() != x.dims() || dy.dtype() != x.dtype())
    c.fail("dy " + dims_str(dy.dims()) + " and x " + dims_str(x.dims()) + " differ in shape or dtype");
  cuda::gelu_and_grad(a.tanh_approx, x.dtype(), dy.raw(), x.raw(), c.out(0).raw(), c.out(1).raw(), x.numel(),
                      stream());
}

KernelDef binary_def(const char* name, Binary op) {
  return {"", name, [op](const ops::Op&, KernelCtx& c) {
            if (c.in(1).dtype() != c.in(0).dtype())
              throw UnsupportedError(c.node.where() + ": the CUDA kernel takes operands of one dtype");
            const auto& od = c.out(0).dims();
            Indexing ix =
                indexing(c, od, {broadcast_strides(c.in(0).dims(), od), broadcast_strides(c.in(1).dims(), od)});
            cuda::binary(op, c.in(0).dtype(), c.in(0).raw(), c.in(1).raw(), c.out(0).raw(), ix, stream());
          }};
}

// Sum, Max or Min of any number of inputs, broadcast: the first two combined, then each further one with the output.
void fold(Binary op, KernelCtx& c) {
  const auto& od = c.out(0).dims();
  const auto contiguous = broadcast_strides(od, od);
  const DType t = c.out(0).dtype();
  if (c.inputs.size() == 1) {
    Indexing ix = indexing(c, od, {contiguous, broadcast_strides(c.in(0).dims(), od)});
    return strided_copy(int(dtype_size(t)), c.in(0).raw(), c.out(0).raw(), ix, stream());
  }
  for (size_t k = 1; k < c.inputs.size(); ++k) {
    const Tensor& a = k == 1 ? c.in(0) : c.out(0);
    Indexing ix = indexing(c, od, {broadcast_strides(a.dims(), od), broadcast_strides(c.in(k).dims(), od)});
    cuda::binary(op, t, a.raw(), c.in(k).raw(), c.out(0).raw(), ix, stream());
  }
}

void where(KernelCtx& c) {
  const auto& od = c.out(0).dims();
  Indexing ix = indexing(c, od,
                         {broadcast_strides(c.in(0).dims(), od), broadcast_strides(c.in(1).dims(), od),
                          broadcast_strides(c.in(2).dims(), od)});
  cuda::where(int(dtype_size(c.out(0).dtype())), c.in(0).data<bool>(), c.in(1).raw(), c.in(2).raw(), c.out(0).raw(),
              ix, stream());
}

void cast(KernelCtx& c) {
  cuda::cast(c.in(0).dtype(), c.out(0).dtype(), c.in(0).raw(), c.out(0).raw(), c.in(0).numel(), stream());
}

void constant_of_shape(const ops::ValueAttrs& at, KernelCtx& c) {
  cuda::fill(int(dtype_size(c.out(0).dtype())), at.value.raw(), c.out(0).raw(), c.out(0).numel(), stream());
}

void range(KernelCtx& c) {
  cuda::range(c.in(0).dtype(), c.in(0).raw(), c.in(2).raw(), c.out(0).raw(), c.out(0).numel(), stream());
}

// As the CPU's kernel (kernels/cpu/dropout.cpp): the same mask for the same seed, the dtypes and the residual r as
// there; where it drops nothing, input 0 as it is (converted where the dtypes differ: a mask keeping all).
void apply(const ops::DropoutAttrs& a, KernelCtx& c, const Tensor* r, bool* mask) {
  const Tensor& x = c.in(0);
  Tensor& y = c.out(0);
  const DropoutCall d = dropout_call(a, c, r);
  if (!d.drops && mask) check(cudaMemsetAsync(mask, 1, size_t(x.numel()), stream()), "cudaMemsetAsync");
  if (!d.drops && y.dtype() == x.dtype() && !r) return copy(x, y);
  cuda::dropout(x.dtype(), y.dtype(), x.raw(), r ? r->raw() : nullptr, y.raw(), d.drops ? mask : nullptr, x.numel(),
                d.seed, d.threshold, float(d.scale), stream());
}

void dropout(const ops::DropoutAttrs& a, KernelCtx& c) {
  apply(a, c, c.has(3) ? &c.in(3) : nullptr, c.wants(1) ? c.out(1).data<bool>() : nullptr);
}
void dropout_grad(const ops::DropoutAttrs& a, KernelCtx& c) { apply(a, c, nullptr, nullptr); }

void identity(KernelCtx& c) { copy(c.in(0), c.out(0)); }

const bool kRegistered = register_kernels(
    cuda_device(0),
    {unary_def("Relu", Unary::kRelu),
     unary_def("Neg", Unary::kNeg),
     unary_def("Abs", Unary::kAbs),
     unary_def("Exp", Unary::kExp),
     unary_def("Log", Unary::kLog),
     unary_def("Sqrt", Unary::kSqrt),
     unary_def("Reciprocal", Unary::kReciprocal),
     unary_def("Tanh", Unary::kTanh),
     unary_def("Sigmoid", Unary::kSigmoid),
     unary_def("Erf", Unary::kErf),
     unary_def("Sin", Unary::kSin),
     unary_def("Cos", Unary::kCos),
     unary_def("Floor", Unary::kFloor),
     unary_def("Ceil", Unary::kCeil),
     unary_def("Not", Unary::kNot),
     {"", "Gelu", kernel(gelu)},
     {"com.onnxtrain", "GeluGrad", kernel(gelu_grad)},
     {"com.onnxtrain", "GeluAndGrad", kernel(gelu_and_grad)},
     binary_def("Add", Binary::kAdd),
     binary_def("Sub", Binary::kSub),
     binary_def("Mul", Binary::kMul),
     binary_def("Div", Binary::kDiv),
     binary_def("Pow", Binary::kPow),
     binary_def("Equal", Binary::kEqual),
     binary_def("Less", Binary::kLess),
     binary_def("LessOrEqual", Binary::kLessOrEqual),
     binary_def("Greater", Binary::kGreater),
     binary_def("GreaterOrEqual", Binary::kGreaterOrEqual),
     binary_def("And", Binary::kAnd),
     binary_def("Or", Binary::kOr),
     binary_def("Xor", Binary::kXor),
     {"", "Sum", [](const ops::Op&, KernelCtx& c) { fold(Binary::kAdd, c); }},
     {"", "Max", [](const ops::Op&, KernelCtx& c) { fold(Binary::kMax, c); }},
     {"", "Min", [](const ops::Op&, KernelCtx& c) { fold(Binary::kMin, c); }},
     {"", "Where", kernel(where)},
     {"", "Cast", kernel(cast)},
     {"", "CastLike", kernel(cast)},
     {"", "ConstantOfShape", kernel(constant_of_shape)},
     {"", "Range", kernel(range)},
     {"", "Identity", kernel(identity)},
     {"", "Dropout", kernel(dropout)},
     {"com.onnxtrain", "Dropout", kernel(dropout)},
     {"com.onnxtrain", "DropoutGrad", kernel(dropout_grad)}});

}  // namespace
}  // namespace onnxtrain::kernels::cuda
