// Ops that move data into a new layout: Transpose, Concat, Split, Expand, Tile, Pad, Trilu (Slice: slice.cpp).
#include "ops/layout.h"

#include <cstring>

#include "kernels/cpu/broadcast.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/strided_copy.h"
#include "kernels/kernel.h"
#include "ops/shape_util.h"

namespace onnxtrain::kernels {
namespace {

using Mode = ops::PadAttrs::Mode;

void transpose(const ops::TransposeAttrs& at, KernelCtx& c) {
  auto p = at.resolved(c.in(0).rank());
  auto in_st = contiguous_strides(c.in(0).dims());
  std::vector<int64_t> st;
  for (auto a : p) st.push_back(in_st[size_t(a)]);
  dispatch_bytes(c.in(0).dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    strided_copy(c.out(0).data<T>(), c.in(0).data<T>(), c.out(0).dims(), st);
  });
}

void concat(const ops::AxisAttrs& at, KernelCtx& c) {
  const auto& od = c.out(0).dims();
  int64_t a = at.axis < 0 ? at.axis + int64_t(od.size()) : at.axis;
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < a; ++i) outer *= od[size_t(i)];
  for (size_t i = size_t(a) + 1; i < od.size(); ++i) inner *= od[i];
  size_t es = dtype_size(c.out(0).dtype());
  char* o = static_cast<char*>(c.out(0).raw());
  int64_t out_row = od[size_t(a)] * inner, pos = 0;
  for (size_t k = 0; k < c.inputs.size(); ++k) {
    if (!c.has(k)) continue;
    int64_t row = c.in(k).dims()[size_t(a)] * inner;
    const char* s = static_cast<const char*>(c.in(k).raw());
    for (int64_t i = 0; i < outer; ++i)
      std::memcpy(o + size_t(i * out_row + pos) * es, s + size_t(i * row) * es, size_t(row) * es);
    pos += row;
  }
}

void split(const ops::SplitAttrs& at, KernelCtx& c) {
  const auto& id = c.in(0).dims();
  int64_t a = at.axis < 0 ? at.axis + int64_t(id.size()) : at.axis;
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < a; ++i) outer *= id[size_t(i)];
  for (size_t i = size_t(a) + 1; i < id.size(); ++i) inner *= id[i];
  size_t es = dtype_size(c.in(0).dtype());
  const char* s = static_cast<const char*>(c.in(0).raw());
  int64_t in_row = id[size_t(a)] * inner, pos = 0;
  for (size_t k = 0; k < c.shapes->num_outputs(); ++k) {  // (an output the node omits still takes its part)
    int64_t row = ops::concrete(c.node, c.shapes->outputs()[k].shape)[size_t(a)] * inner;
    if (c.wants(k)) {
      char* o = static_cast<char*>(c.out(k).raw());
      for (int64_t i = 0; i < outer; ++i)
        std::memcpy(o + size_t(i * row) * es, s + size_t(i * in_row + pos) * es, size_t(row) * es);
    }
    pos += row;
  }
}

void expand(KernelCtx& c) {
  const auto& od = c.out(0).dims();
  auto st = broadcast_strides(c.in(0).dims(), od);
  dispatch_bytes(c.in(0).dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    strided_copy(c.out(0).data<T>(), c.in(0).data<T>(), od, st);
  });
}

void tile(KernelCtx& c) {
  // View the output as (r0, d0, r1, d1, ...) and copy the input with zero strides on r_i.
  const auto& id = c.in(0).dims();
  auto in_st = contiguous_strides(id);
  std::vector<int64_t> dims, st;
  for (size_t i = 0; i < id.size(); ++i) {
    dims.push_back(c.out(0).dims()[i] / std::max<int64_t>(id[i], 1));
    st.push_back(0);
    dims.push_back(id[i]);
    st.push_back(in_st[i]);
  }
  dispatch_bytes(c.in(0).dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    strided_copy(c.out(0).data<T>(), c.in(0).data<T>(), dims, st);
  });
}

void pad(const ops::PadAttrs& at, KernelCtx& c) {
  auto pv = at.resolved(*c.shapes);
  const auto& id = c.in(0).dims();
  const auto& od = c.out(0).dims();
  int64_t r = int64_t(id.size());
  auto before = std::vector<int64_t>(size_t(r));
  for (int64_t i = 0; i < r; ++i) before[size_t(i)] = pv[size_t(i)].value();
  auto in_st = contiguous_strides(id);
  int64_t n = c.out(0).numel();
  dispatch<kAll>(c.in(0).dtype(), c.node.where(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T fill = T(at.value);
    if (c.has(2) && c.in(2).numel()) fill = c.in(2).data<T>()[0];
    const T* x = c.in(0).data<T>();
    T* o = c.out(0).data<T>();
    for (int64_t i = 0; i < n; ++i) {
      int64_t rem = i, off = 0;
      bool inside = true;
      for (int64_t d = r - 1; d >= 0; --d) {
        int64_t q = rem % od[size_t(d)] - before[size_t(d)], size = id[size_t(d)];
        rem /= od[size_t(d)];
        if (q < 0 || q >= size) {
          if (at.mode == Mode::kConstant || size == 0)
            inside = false;
          else if (at.mode == Mode::kEdge)
            q = q < 0 ? 0 : size - 1;
          else if (at.mode == Mode::kWrap)
            q = ((q % size) + size) % size;
          else {  // reflect, without repeating the edge
            int64_t period = 2 * (size - 1);
            q = period == 0 ? 0 : ((q % period) + period) % period;
            if (q >= size) q = period - q;
          }
        }
        off += q * in_st[size_t(d)];
      }
      o[i] = inside ? x[off] : fill;
    }
  });
}

void trilu(const ops::TriluAttrs& at, KernelCtx& c) {
  int64_t k = c.has(1) ? c.in(1).to_int64()[0] : 0;
  const auto& d = c.in(0).dims();
  int64_t rows = d[d.size() - 2], cols = d[d.size() - 1], batch = c.in(0).numel() / std::max<int64_t>(rows * cols, 1);
  dispatch_bytes(c.in(0).dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = c.in(0).data<T>();
    T* o = c.out(0).data<T>();
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) {
          int64_t idx = (b * rows + i) * cols + j;
          bool keep = at.upper ? j - i >= k : j - i <= k;
          o[idx] = keep ? x[idx] : T(0);
        }
  });
}

const bool kRegistered = register_kernels(kCpu, {
                                                    {"", "Transpose", kernel(transpose)},
                                                    {"", "Concat", kernel(concat)},
                                                    {"", "Split", kernel(split)},
                                                    {"", "Expand", kernel(expand)},
                                                    {"", "Tile", kernel(tile)},
                                                    {"", "Pad", kernel(pad)},
                                                    {"", "Trilu", kernel(trilu)},
                                                });

}  // namespace
}  // namespace onnxtrain::kernels
