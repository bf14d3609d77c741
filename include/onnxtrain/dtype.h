// Element types: their ONNX codes, names, sizes and DLPack codes, in one table (dtypes()) that the bindings read
// too (onnxtrain's DLPack bridge, the capture's PyTorch dtypes).
#pragma once
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace onnxtrain {

// Values are ONNX TensorProto.DataType codes, so conversion is a cast.
enum class DType : int32_t {
  kUndefined = 0,
  kFloat32 = 1,
  kUInt8 = 2,
  kInt8 = 3,
  kInt32 = 6,
  kInt64 = 7,
  kBool = 9,
  kFloat16 = 10,
  kFloat64 = 11,
  kBFloat16 = 16,
};

// One dtype onnxtrain holds. `name` is PyTorch's and numpy's (torch.<name>), `dl_code` DLPack's DLDataTypeCode
// (its bits are size * 8).
struct DTypeInfo {
  DType dtype;
  const char* name;
  size_t size;
  bool is_float;
  uint8_t dl_code;
};
// Every dtype onnxtrain holds.
const std::vector<DTypeInfo>& dtypes();

size_t dtype_size(DType t);      // 0 for kUndefined
std::string dtype_name(DType t);  // "undefined" for kUndefined
bool dtype_is_float(DType t);     // float16/bfloat16/float32/float64
bool dtype_is_16bit_float(DType t);  // float16/bfloat16
// Maps an ONNX code to a DType; kUndefined for codes onnxtrain does not hold.
DType dtype_from_onnx(int32_t code);

// float16 and bfloat16: their bits, converted to and from float (rounding to nearest even). The conversions
// make them arithmetic types of a kind: kernels templated on the element type compute on them in float, and
// accumulate in acc_t<T> (float) rather than in T.
struct Half;
struct BFloat16;
float half_to_float(Half h);
Half float_to_half(float f);
float bf16_to_float(BFloat16 b);
BFloat16 float_to_bf16(float f);

struct Half {
  uint16_t bits = 0;
  Half() = default;
  explicit Half(float f) : bits(float_to_half(f).bits) {}
  operator float() const { return half_to_float(*this); }
  static Half from_bits(uint16_t b) {
    Half h;
    h.bits = b;
    return h;
  }
};

struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  explicit BFloat16(float f) : bits(float_to_bf16(f).bits) {}
  operator float() const { return bf16_to_float(*this); }
  static BFloat16 from_bits(uint16_t b) {
    BFloat16 h;
    h.bits = b;
    return h;
  }
};

inline float bf16_to_float(BFloat16 b) {
  uint32_t u = uint32_t(b.bits) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}
inline BFloat16 float_to_bf16(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  if ((u & 0x7fffffff) > 0x7f800000u) return BFloat16::from_bits(uint16_t((u >> 16) | 0x40));  // NaN stays NaN
  u += 0x7fff + ((u >> 16) & 1);
  return BFloat16::from_bits(uint16_t(u >> 16));
}

}  // namespace onnxtrain

// Limits of the two, for kernels templated on the element type.
template <>
struct std::numeric_limits<onnxtrain::BFloat16> {
  using T = onnxtrain::BFloat16;
  static constexpr bool is_specialized = true, is_signed = true, is_integer = false, has_infinity = true;
  static T lowest() { return T::from_bits(0xff7f); }
  static T max() { return T::from_bits(0x7f7f); }
  static T min() { return T::from_bits(0x0080); }
  static T epsilon() { return T::from_bits(0x3c00); }
  static T infinity() { return T::from_bits(0x7f80); }
  static T quiet_NaN() { return T::from_bits(0x7fc0); }
};
template <>
struct std::numeric_limits<onnxtrain::Half> {
  using T = onnxtrain::Half;
  static constexpr bool is_specialized = true, is_signed = true, is_integer = false, has_infinity = true;
  static T lowest() { return T::from_bits(0xfbff); }
  static T max() { return T::from_bits(0x7bff); }
  static T min() { return T::from_bits(0x0400); }
  static T epsilon() { return T::from_bits(0x1400); }
  static T infinity() { return T::from_bits(0x7c00); }
  static T quiet_NaN() { return T::from_bits(0x7e00); }
};
