// Shapes and strides as every device's kernels read them: broadcasting (ONNX/NumPy rules), row-major strides, and
// where an element sits in broadcast inputs. Pure index arithmetic: no device, no loop over data.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace onnxtrain::kernels {

// Strides of an input of dims `in` when read at the coordinates of `out` (0 where broadcast).
std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& in, const std::vector<int64_t>& out);
// The broadcast result of two concrete shapes; false when incompatible.
bool broadcast_dims(const std::vector<int64_t>& a, const std::vector<int64_t>& b, std::vector<int64_t>* out);
// Whether `p` broadcasts over `dims` as their trailing part: right-aligned, leading dims of 1, then the same dims to
// the end (a norm's scale or bias over the normalized dims); element j of a row of `dims` then reads p[j % p's size].
bool broadcasts_as_suffix(const std::vector<int64_t>& p, const std::vector<int64_t>& dims);
// Row-major element strides of dims.
std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& dims);

// Where element i (row-major) of an array of dims `dims` sits in each of N inputs read with strides `st`
// (broadcast_strides to dims, or to longer dims whose leading part `dims` is).
template <std::size_t N>
std::array<int64_t, N> broadcast_offsets(int64_t i, const std::vector<int64_t>& dims,
                                         std::array<const std::vector<int64_t>*, N> st) {
  std::array<int64_t, N> off{};
  for (int64_t d = int64_t(dims.size()) - 1; d >= 0; --d) {
    int64_t c = i % dims[std::size_t(d)];
    i /= dims[std::size_t(d)];
    for (std::size_t k = 0; k < N; ++k) off[k] += c * (*st[k])[std::size_t(d)];
  }
  return off;
}

}  // namespace onnxtrain::kernels
