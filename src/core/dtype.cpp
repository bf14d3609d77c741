#include "core/dtype.h"

#include <cmath>
#include <cstring>

namespace onnxtrain {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kFloat32:
    case DType::kInt32:
      return 4;
    case DType::kFloat64:
    case DType::kInt64:
      return 8;
    case DType::kFloat16:
    case DType::kBFloat16:
      return 2;
    case DType::kUInt8:
    case DType::kInt8:
    case DType::kBool:
      return 1;
    default:
      return 0;
  }
}

std::string dtype_name(DType t) {
  switch (t) {
    case DType::kFloat32:
      return "float32";
    case DType::kFloat64:
      return "float64";
    case DType::kFloat16:
      return "float16";
    case DType::kBFloat16:
      return "bfloat16";
    case DType::kInt64:
      return "int64";
    case DType::kInt32:
      return "int32";
    case DType::kInt8:
      return "int8";
    case DType::kUInt8:
      return "uint8";
    case DType::kBool:
      return "bool";
    case DType::kString:
      return "string";
    default:
      return "undefined";
  }
}

bool dtype_is_float(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kFloat16 || t == DType::kBFloat16;
}

DType dtype_from_onnx(int32_t code) {
  switch (code) {
    case 1:
    case 2:
    case 3:
    case 6:
    case 7:
    case 9:
    case 10:
    case 11:
    case 16:
      return DType(code);
    default:
      return DType::kUndefined;
  }
}

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
