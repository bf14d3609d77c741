// Integer arithmetic that wraps around, as NumPy and other ONNX runtimes do (signed overflow is undefined
// behaviour in C++); other types compute as usual. Division by -1 negates (INT_MIN / -1 traps on x86).
#pragma once
#include <type_traits>

namespace onnxtrain::kernels {

template <typename T>
constexpr bool kWraps = std::is_integral_v<T>&& std::is_signed_v<T>;

template <typename T>
auto wrapping_add(T a, T b) {
  if constexpr (kWraps<T>)
    return T(std::make_unsigned_t<T>(a) + std::make_unsigned_t<T>(b));
  else
    return a + b;
}
template <typename T>
auto wrapping_sub(T a, T b) {
  if constexpr (kWraps<T>)
    return T(std::make_unsigned_t<T>(a) - std::make_unsigned_t<T>(b));
  else
    return a - b;
}
template <typename T>
auto wrapping_mul(T a, T b) {
  if constexpr (kWraps<T>)
    return T(std::make_unsigned_t<T>(a) * std::make_unsigned_t<T>(b));
  else
    return a * b;
}
template <typename T>
auto wrapping_neg(T a) {
  if constexpr (kWraps<T>)
    return T(std::make_unsigned_t<T>(0) - std::make_unsigned_t<T>(a));
  else
    return -a;
}

}  // namespace onnxtrain::kernels
