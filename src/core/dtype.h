// Element types and their ONNX codes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace onnxtrain {

// Values are ONNX TensorProto.DataType codes, so conversion is a cast.
enum class DType : int32_t {
  kUndefined = 0,
  kFloat32 = 1,
  kUInt8 = 2,
  kInt8 = 3,
  kInt32 = 6,
  kInt64 = 7,
  kString = 8,
  kBool = 9,
  kFloat16 = 10,
  kFloat64 = 11,
  kBFloat16 = 16,
};

size_t dtype_size(DType t);
std::string dtype_name(DType t);
bool dtype_is_float(DType t);  // float16/bfloat16/float32/float64
// Maps an ONNX code to a DType; kUndefined for codes onnxtrain does not hold.
DType dtype_from_onnx(int32_t code);

// Storage types of float16 and bfloat16, converted through float.
struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};
float half_to_float(Half h);
Half float_to_half(float f);
inline float bf16_to_float(BFloat16 b) {
  uint32_t u = uint32_t(b.bits) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}
BFloat16 float_to_bf16(float f);

}  // namespace onnxtrain
