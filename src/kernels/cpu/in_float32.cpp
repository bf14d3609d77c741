#include "kernels/cpu/in_float32.h"

#include "kernels/cpu/convert.h"
#include "ops/op.h"

namespace onnxtrain::kernels {
namespace {

template <typename Low>
void convert_low(bool to_low, const void* x, void* y, int64_t n) {
  if (to_low)
    from_f32(static_cast<const float*>(x), static_cast<Low*>(y), n);
  else
    to_f32(static_cast<const Low*>(x), static_cast<float*>(y), n);
}

void convert(DType from, DType to, const void* x, void* y, int64_t n) {
  const bool to_low = from == DType::kFloat32;
  if ((to_low ? to : from) == DType::kBFloat16)
    convert_low<BFloat16>(to_low, x, y, n);
  else
    convert_low<Half>(to_low, x, y, n);
}

}  // namespace

KernelDef in_float32(KernelDef def, bool (*bf16_native)()) { return in_float32(std::move(def), convert, bf16_native); }

KernelDef in_float32(KernelDef def, bool (*takes_as_is)(ops::InferCtx&)) {
  return in_float32(std::move(def), convert, takes_as_is);
}

bool float32_but_one_bf16(ops::InferCtx& s, int input, int output) {
  auto want = [](size_t i, int bf16) { return int(i) == bf16 ? DType::kBFloat16 : DType::kFloat32; };
  for (size_t i = 0; i < s.num_inputs(); ++i)
    if (s.has(i) && s.dtype(i) != want(i, input)) return false;
  for (size_t i = 0; i < s.outputs().size(); ++i)
    if (s.outputs()[i].dtype != want(i, output)) return false;
  return true;
}

}  // namespace onnxtrain::kernels
