// Copies a strided view into a contiguous buffer: the one loop behind
// Transpose, Slice, Expand and friends.
#pragma once
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/parallel.h"
#include "kernels/strides.h"

namespace onnxtrain::kernels {

// dst (contiguous, dims) <- src at element strides `st` (may be 0 or negative); with kScatter the other way,
// dst at strides `st` (none 0) <- src (contiguous).
template <bool kScatter = false, typename T>
void strided_copy(T* dst, const T* src, const std::vector<int64_t>& dims, const std::vector<int64_t>& st) {
  int64_t n = 1;
  for (auto d : dims) n *= d;
  if (n == 0) return;
  if (dims.empty()) {
    dst[0] = src[0];
    return;
  }
  const int64_t rank = int64_t(dims.size());
  const int64_t inner = dims[size_t(rank - 1)], s_in = st[size_t(rank - 1)];
  const int64_t rows = n / inner;
  parallel_for(rows, inner, [&](int64_t rb, int64_t re) {
    for (int64_t r = rb; r < re; ++r) {
      int64_t off = 0, rem = r;
      for (int64_t d = rank - 2; d >= 0; --d) {
        off += (rem % dims[size_t(d)]) * st[size_t(d)];
        rem /= dims[size_t(d)];
      }
      if constexpr (kScatter) {
        T* o = dst + off;
        const T* s = src + r * inner;
        if (s_in == 1)
          std::memcpy(o, s, size_t(inner) * sizeof(T));
        else
          for (int64_t j = 0; j < inner; ++j) o[j * s_in] = s[j];
      } else {
        T* o = dst + r * inner;
        const T* s = src + off;
        if (s_in == 1)
          std::memcpy(o, s, size_t(inner) * sizeof(T));
        else
          for (int64_t j = 0; j < inner; ++j) o[j] = s[j * s_in];
      }
    }
  });
}

}  // namespace onnxtrain::kernels
