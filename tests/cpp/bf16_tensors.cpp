#include "bf16_tensors.h"

namespace onnxtrain::bf16_tensors {

Tensor random_exact(const std::vector<int64_t>& dims, std::mt19937& rng, float scale) {
  std::normal_distribution<float> d(0, scale);
  Tensor t(DType::kFloat32, dims);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = float(BFloat16(d(rng)));
  return t;
}

Tensor as(DType dtype, const Tensor& t) {
  if (!t.defined() || dtype == t.dtype() || t.dtype() != DType::kFloat32) return t;
  Tensor r(DType::kBFloat16, t.dims());
  for (int64_t i = 0; i < t.numel(); ++i) r.data<BFloat16>()[i] = BFloat16(t.data<float>()[i]);
  return r;
}

std::vector<float> floats(const Tensor& t) {
  std::vector<float> r(size_t(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i)
    r[size_t(i)] = t.dtype() == DType::kBFloat16 ? float(t.data<BFloat16>()[i]) : t.data<float>()[i];
  return r;
}

}  // namespace onnxtrain::bf16_tensors
