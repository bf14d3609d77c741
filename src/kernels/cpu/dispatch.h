// Dtype dispatch: calls fn with a value of the C++ type for a DType.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "onnxtrain/dtype.h"
#include "onnxtrain/error.h"

namespace onnxtrain::kernels {

template <typename T>
struct Tag {
  using type = T;
};

// Which dtypes a kernel accepts. kFloats includes bfloat16 and float16, computed in float (acc_t); kernels that
// take kWideFloats only serve those through in_float32 (kernels/cpu/in_float32.h).
enum TypeSet {
  kWideFloats = 1,  // float32, float64
  kInts = 2,
  kBool = 4,
  kLowFloats = 8,  // bfloat16, float16
  kBf16 = 16,      // bfloat16 alone (kernels with their own bf16 path and float16 through in_float32)
  kFloats = kWideFloats | kLowFloats,
  kNumeric = kFloats | kInts,
  kWideNumeric = kWideFloats | kInts,
  kAll = kNumeric | kBool
};

template <typename T>
inline constexpr bool kLowFloat = std::is_same_v<T, BFloat16> || std::is_same_v<T, Half>;
// Floating-point element types, bfloat16 and float16 included.
template <typename T>
inline constexpr bool kFloat = std::is_floating_point_v<T> || kLowFloat<T>;
// The type a kernel computes and accumulates in for elements of type T: float for bfloat16 and float16.
template <typename T>
using acc_t = std::conditional_t<kLowFloat<T>, float, T>;

template <int Set, typename F>
void dispatch(DType t, const std::string& where, F&& fn) {
  if constexpr ((Set & kWideFloats) != 0) {
    if (t == DType::kFloat32) return fn(Tag<float>{});
    if (t == DType::kFloat64) return fn(Tag<double>{});
  }
  if constexpr ((Set & (kLowFloats | kBf16)) != 0)
    if (t == DType::kBFloat16) return fn(Tag<BFloat16>{});
  if constexpr ((Set & kLowFloats) != 0)
    if (t == DType::kFloat16) return fn(Tag<Half>{});
  if constexpr ((Set & kInts) != 0) {
    if (t == DType::kInt64) return fn(Tag<int64_t>{});
    if (t == DType::kInt32) return fn(Tag<int32_t>{});
    if (t == DType::kInt8) return fn(Tag<int8_t>{});
    if (t == DType::kUInt8) return fn(Tag<uint8_t>{});
  }
  if constexpr ((Set & kBool) != 0)
    if (t == DType::kBool) return fn(Tag<bool>{});
  throw UnsupportedError(where + ": dtype " + dtype_name(t) + " is not supported by this kernel");
}

// Conversions through double for every held type, float16 and bfloat16 included.
template <typename T>
inline double to_double(T v) {
  if constexpr (std::is_same_v<T, Half>)
    return half_to_float(v);
  else if constexpr (std::is_same_v<T, BFloat16>)
    return bf16_to_float(v);
  else
    return double(v);
}
// To an integer type: NaN is 0 and values past the type's range saturate (C++ leaves converting them undefined,
// ONNX leaves the result unspecified).
template <typename T>
inline T from_double(double v) {
  if constexpr (std::is_same_v<T, Half>) {
    return float_to_half(float(v));
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return float_to_bf16(float(v));
  } else if constexpr (std::is_same_v<T, bool>) {
    return v != 0;
  } else if constexpr (std::is_integral_v<T>) {
    if (std::isnan(v)) return T(0);
    // The bounds as doubles: the lowest is a power of two (exact); max() rounds up to one, so compare with >=.
    if (v <= double(std::numeric_limits<T>::lowest())) return std::numeric_limits<T>::lowest();
    if (v >= double(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
    return T(v);
  } else {
    return T(v);
  }
}

}  // namespace onnxtrain::kernels

namespace onnxtrain::kernels {

// For ops that only move elements: dispatch on the element size alone.
template <typename F>
void dispatch_bytes(DType t, F&& fn) {
  switch (dtype_size(t)) {
    case 1:
      return fn(Tag<uint8_t>{});
    case 2:
      return fn(Tag<uint16_t>{});
    case 4:
      return fn(Tag<uint32_t>{});
    default:
      return fn(Tag<uint64_t>{});
  }
}

}  // namespace onnxtrain::kernels
