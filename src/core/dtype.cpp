#include "onnxtrain/dtype.h"

#include <array>
#include <cmath>
#include <cstring>

namespace onnxtrain {

const std::vector<DTypeInfo>& dtypes() {
  // DLPack's codes: kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4 (python/dlpack_bridge.cpp checks them), kDLBool 6.
  static const std::vector<DTypeInfo> table = {
      {DType::kFloat32, "float32", 4, true, 2},  {DType::kFloat64, "float64", 8, true, 2},
      {DType::kFloat16, "float16", 2, true, 2},  {DType::kBFloat16, "bfloat16", 2, true, 4},
      {DType::kInt64, "int64", 8, false, 0},     {DType::kInt32, "int32", 4, false, 0},
      {DType::kInt8, "int8", 1, false, 0},       {DType::kUInt8, "uint8", 1, false, 1},
      {DType::kBool, "bool", 1, false, 6},
  };
  return table;
}

// The table's entry for an ONNX code; null where onnxtrain holds none.
static const DTypeInfo* info(int64_t code) {
  static const std::array<const DTypeInfo*, 17> by_code = [] {
    std::array<const DTypeInfo*, 17> a{};
    for (const DTypeInfo& d : dtypes()) a[size_t(d.dtype)] = &d;
    return a;
  }();
  return code >= 0 && code < int64_t(by_code.size()) ? by_code[size_t(code)] : nullptr;
}

size_t dtype_size(DType t) {
  const DTypeInfo* d = info(int64_t(t));
  return d ? d->size : 0;
}
std::string dtype_name(DType t) {
  const DTypeInfo* d = info(int64_t(t));
  return d ? d->name : "undefined";
}
bool dtype_is_float(DType t) {
  const DTypeInfo* d = info(int64_t(t));
  return d && d->is_float;
}
bool dtype_is_16bit_float(DType t) { return t == DType::kBFloat16 || t == DType::kFloat16; }
DType dtype_from_onnx(int32_t code) { return info(code) ? DType(code) : DType::kUndefined; }

float half_to_float(Half h) {
  uint32_t sign = uint32_t(h.bits & 0x8000) << 16, exp = (h.bits >> 10) & 0x1f, man = h.bits & 0x3ff;
  float f;
  if (exp == 0) {  // zero or subnormal
    f = std::ldexp(float(man), -24);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    u |= sign;
    std::memcpy(&f, &u, 4);
    return f;
  }
  uint32_t u = exp == 31 ? (sign | 0x7f800000u | (man << 13)) : (sign | ((exp + 112) << 23) | (man << 13));
  std::memcpy(&f, &u, 4);
  return f;
}

Half float_to_half(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint16_t sign = (u >> 16) & 0x8000;
  uint32_t abs = u & 0x7fffffff;
  if (abs >= 0x7f800000u) return Half::from_bits(uint16_t(sign | 0x7c00 | (abs > 0x7f800000u ? 0x200 : 0)));
  if (abs >= 0x477ff000u) return Half::from_bits(uint16_t(sign | 0x7c00));  // rounds to infinity
  if (abs < 0x38800000u) {  // subnormal half: round to nearest even in units of 2^-24
    float a;
    std::memcpy(&a, &abs, 4);
    return Half::from_bits(uint16_t(sign | uint16_t(std::nearbyint(a * 16777216.0f))));
  }
  uint32_t mant_round = abs + 0xfff + ((abs >> 13) & 1);  // round to nearest even
  return Half::from_bits(uint16_t(sign | ((mant_round - 0x38000000u) >> 13)));
}

}  // namespace onnxtrain
