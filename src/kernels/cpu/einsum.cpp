// Einsum: any equation with ellipsis and implicit output, evaluated as one loop over all labels (correct for every
// case; no BLAS fast path yet).
#include "ops/einsum.h"

#include <map>

#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/in_float32.h"
#include "kernels/kernel.h"

namespace onnxtrain::kernels {
namespace {

void einsum(const ops::EinsumAttrs& at, KernelCtx& c) {
  ops::EinsumAttrs::Equation e = at.parse(*c.shapes);
  std::string labels = e.output;
  for (auto& t : e.inputs)
    for (char ch : t)
      if (labels.find(ch) == std::string::npos) labels += ch;
  std::map<char, int64_t> size;
  for (size_t k = 0; k < e.inputs.size(); ++k) {
    if (e.inputs[k].size() != size_t(c.in(k).rank()))
      c.fail("term '" + e.inputs[k] + "' does not label input " + std::to_string(k) + " " + dims_str(c.in(k).dims()));
    for (size_t j = 0; j < e.inputs[k].size(); ++j) {
      int64_t d = c.in(k).dims()[j];
      char ch = e.inputs[k][j];
      if (size.count(ch) && size[ch] != d && size[ch] != 1 && d != 1)
        c.fail(std::string("label '") + ch + "' has sizes " + std::to_string(size[ch]) + " and " + std::to_string(d));
      if (!size.count(ch) || size[ch] == 1) size[ch] = d;
    }
  }
  std::vector<int64_t> extent;
  for (char ch : labels) extent.push_back(size[ch]);
  // Element strides of each operand per label (0 where absent or broadcast).
  std::vector<std::vector<int64_t>> strides(e.inputs.size(), std::vector<int64_t>(labels.size(), 0));
  for (size_t k = 0; k < e.inputs.size(); ++k) {
    int64_t st = 1;
    for (int64_t j = int64_t(e.inputs[k].size()) - 1; j >= 0; --j) {
      int64_t d = c.in(k).dims()[size_t(j)];
      if (d != 1) strides[k][labels.find(e.inputs[k][size_t(j)])] += st;
      st *= d;
    }
  }
  int64_t n_out = 1, n_sum = 1;
  for (size_t i = 0; i < labels.size(); ++i) (i < e.output.size() ? n_out : n_sum) *= extent[i];
  dispatch<kWideNumeric>(c.in(0).dtype(), c.node.where(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* out = c.out(0).data<T>();
    std::vector<const T*> in;
    for (size_t k = 0; k < e.inputs.size(); ++k) in.push_back(c.in(k).data<T>());
    std::vector<int64_t> idx(labels.size());
    for (int64_t o = 0; o < n_out; ++o) {
      int64_t rem = o;
      for (int64_t i = int64_t(e.output.size()) - 1; i >= 0; --i) {
        idx[size_t(i)] = rem % extent[size_t(i)];
        rem /= extent[size_t(i)];
      }
      T acc = 0;
      for (int64_t s = 0; s < n_sum; ++s) {
        int64_t srem = s;
        for (int64_t i = int64_t(labels.size()) - 1; i >= int64_t(e.output.size()); --i) {
          idx[size_t(i)] = srem % extent[size_t(i)];
          srem /= extent[size_t(i)];
        }
        T prod = 1;
        for (size_t k = 0; k < e.inputs.size(); ++k) {
          int64_t off = 0;
          for (size_t i = 0; i < labels.size(); ++i) off += idx[i] * strides[k][i];
          prod *= in[k][off];
        }
        acc += prod;
      }
      out[o] = acc;
    }
  });
}

const bool kRegistered = register_kernels(kCpu, {in_float32({"", "Einsum", kernel(einsum)})});

}  // namespace
}  // namespace onnxtrain::kernels
