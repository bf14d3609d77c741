#include "kernels/strides.h"

#include <algorithm>

namespace onnxtrain::kernels {

std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& in, const std::vector<int64_t>& out) {
  std::vector<int64_t> st(out.size(), 0);
  int64_t stride = 1;
  int64_t off = int64_t(out.size()) - int64_t(in.size());
  for (int64_t d = int64_t(in.size()) - 1; d >= 0; --d) {
    st[size_t(d + off)] = in[size_t(d)] == 1 ? 0 : stride;
    stride *= in[size_t(d)];
  }
  return st;
}

bool broadcast_dims(const std::vector<int64_t>& a, const std::vector<int64_t>& b, std::vector<int64_t>* out) {
  size_t r = std::max(a.size(), b.size());
  out->assign(r, 1);
  for (size_t i = 0; i < r; ++i) {
    int64_t x = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t y = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (x != y && x != 1 && y != 1) return false;
    (*out)[i] = x == 1 ? y : x;
  }
  return true;
}

bool broadcasts_as_suffix(const std::vector<int64_t>& p, const std::vector<int64_t>& dims) {
  if (p.size() > dims.size()) return false;
  size_t off = dims.size() - p.size(), i = 0;
  while (i < p.size() && p[i] == 1) ++i;
  for (; i < p.size(); ++i)
    if (p[i] != dims[off + i]) return false;
  return true;
}

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> st(dims.size(), 1);
  for (int64_t i = int64_t(dims.size()) - 2; i >= 0; --i) st[size_t(i)] = st[size_t(i + 1)] * dims[size_t(i + 1)];
  return st;
}

}  // namespace onnxtrain::kernels
