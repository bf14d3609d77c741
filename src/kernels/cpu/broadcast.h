// The generic elementwise loop: N inputs broadcast (ONNX/NumPy rules) to one
// output. Contiguous and scalar cases run as flat, vectorizable loops; the
// general case walks rows of the innermost dim with per-input strides.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/parallel.h"
#include "kernels/strides.h"

namespace onnxtrain::kernels {

// The row walk behind every broadcast loop of mixed element types:
// row(out_offset, in_offsets, in_inner_strides, inner_len) for each row of the
// output's innermost dim, rows split over threads.
template <std::size_t N, typename Row>
void broadcast_rows(const std::vector<int64_t>& out_dims, std::array<const std::vector<int64_t>*, N> in_dims, Row row) {
  int64_t n = 1;
  for (auto d : out_dims) n *= d;
  if (n == 0) return;
  if (out_dims.empty()) return row(int64_t(0), std::array<int64_t, N>{}, std::array<int64_t, N>{}, int64_t(1));
  const int64_t rank = int64_t(out_dims.size());
  std::array<std::vector<int64_t>, N> st;
  std::array<int64_t, N> inner_st;
  for (std::size_t k = 0; k < N; ++k) {
    st[k] = broadcast_strides(*in_dims[k], out_dims);
    inner_st[k] = st[k][std::size_t(rank - 1)];
  }
  const int64_t inner = out_dims[std::size_t(rank - 1)];
  parallel_for(n / inner, inner * 2, [&](int64_t rb, int64_t re) {
    for (int64_t r = rb; r < re; ++r) {
      std::array<int64_t, N> off{};
      int64_t rem = r;
      for (int64_t d = rank - 2; d >= 0; --d) {
        int64_t c = rem % out_dims[std::size_t(d)];
        rem /= out_dims[std::size_t(d)];
        for (std::size_t k = 0; k < N; ++k) off[k] += c * st[k][std::size_t(d)];
      }
      row(r * inner, off, inner_st, inner);
    }
  });
}

template <std::size_t N, typename In, typename Out, typename F>
void broadcast_apply(Out* out, const std::vector<int64_t>& out_dims, std::array<const In*, N> in,
                     std::array<const std::vector<int64_t>*, N> in_dims, F f) {
  int64_t n = 1;
  for (auto d : out_dims) n *= d;
  if (n == 0) return;
  bool flat = true;
  for (std::size_t k = 0; k < N; ++k) {
    int64_t m = 1;
    for (auto d : *in_dims[k]) m *= d;
    flat = flat && m == n;
  }
  if (flat) {
    parallel_for(n, 4, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        if constexpr (N == 1)
          out[i] = f(in[0][i]);
        else if constexpr (N == 2)
          out[i] = f(in[0][i], in[1][i]);
        else
          out[i] = f(in[0][i], in[1][i], in[2][i]);
      }
    });
    return;
  }
  broadcast_rows<N>(out_dims, in_dims, [&](int64_t oo, auto off, auto s, int64_t inner) {
    Out* o = out + oo;
    if constexpr (N == 2) {  // the common cases as contiguous, vectorizable loops
      const In* a = in[0] + off[0];
      const In* b = in[1] + off[1];
      if (s[0] == 1 && s[1] == 1)
        for (int64_t j = 0; j < inner; ++j) o[j] = f(a[j], b[j]);
      else if (s[0] == 1)
        for (int64_t j = 0; j < inner; ++j) o[j] = f(a[j], b[0]);
      else if (s[1] == 1)
        for (int64_t j = 0; j < inner; ++j) o[j] = f(a[0], b[j]);
      else
        for (int64_t j = 0; j < inner; ++j) o[j] = f(a[0], b[0]);
    } else {
      for (int64_t j = 0; j < inner; ++j) {
        if constexpr (N == 1)
          o[j] = f(in[0][off[0] + j * s[0]]);
        else
          o[j] = f(in[0][off[0] + j * s[0]], in[1][off[1] + j * s[1]], in[2][off[2] + j * s[2]]);
      }
    }
  });
}

}  // namespace onnxtrain::kernels
