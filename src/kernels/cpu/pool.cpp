// MaxPool (with indices), AveragePool and its gradient com.onnxtrain.AveragePoolGrad, GlobalAveragePool and
// GlobalMaxPool.
#include "ops/pool.h"

#include <algorithm>
#include <cmath>

#include "core/parallel.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/in_float32.h"
#include "kernels/kernel.h"

namespace onnxtrain::kernels {
namespace {

using ops::Window;

// The windows of a pooling op over one input: for output position o, the flat offsets of the kernel
// positions inside the input, and how many fall inside the input with its pads (count_include_pad's divisor).
class Windows {
 public:
  Windows(const Window& win, std::vector<int64_t> in_sp, std::vector<int64_t> out_sp)
      : win_(win),
        in_(std::move(in_sp)),
        out_(std::move(out_sp)),
        pads_(win.resolved_pads(in_)),
        start_(in_.size()),
        kidx_(in_.size()) {}
  int64_t in_size() const { return numel_of(in_); }
  int64_t out_size() const { return numel_of(out_); }
  int64_t kernel_size() const { return numel_of(win_.kernel); }
  const std::vector<int64_t>& in_sizes() const { return in_; }
  // Fills offs with the in-input positions of window o (in kernel order); returns the count within the pads.
  int64_t at(int64_t o, std::vector<int64_t>* offs) {
    const int64_t nd = int64_t(in_.size());
    offs->clear();
    for (int64_t d = nd - 1; d >= 0; --d) {
      start_[size_t(d)] = (o % out_[size_t(d)]) * win_.strides[size_t(d)] - pads_[size_t(d)];
      o /= out_[size_t(d)];
    }
    int64_t padded = 0;
    for (int64_t k = 0, ks = kernel_size(); k < ks; ++k) {
      int64_t krem = k;
      bool inside = true, in_padded = true;
      for (int64_t d = nd - 1; d >= 0; --d) {
        int64_t pos = start_[size_t(d)] + (krem % win_.kernel[size_t(d)]) * win_.dilations[size_t(d)];
        kidx_[size_t(d)] = pos;
        krem /= win_.kernel[size_t(d)];
        if (pos < 0 || pos >= in_[size_t(d)]) inside = false;
        if (pos < -pads_[size_t(d)] || pos >= in_[size_t(d)] + pads_[size_t(d + nd)]) in_padded = false;
      }
      padded += in_padded;
      if (!inside) continue;
      int64_t off = 0;
      for (int64_t d = 0; d < nd; ++d) off = off * in_[size_t(d)] + kidx_[size_t(d)];
      offs->push_back(off);
    }
    return padded;
  }

 private:
  const Window& win_;
  std::vector<int64_t> in_, out_, pads_, start_, kidx_;
};

std::vector<int64_t> spatial(const std::vector<int64_t>& dims) { return {dims.begin() + 2, dims.end()}; }

// A flat row-major offset as the column-major one (MaxPool's storage_order 1).
int64_t column_major(int64_t off, const std::vector<int64_t>& dims) {
  std::vector<int64_t> idx(dims.size());
  for (int64_t d = int64_t(dims.size()) - 1; d >= 0; --d) {
    idx[size_t(d)] = off % dims[size_t(d)];
    off /= dims[size_t(d)];
  }
  int64_t r = 0;
  for (int64_t d = int64_t(dims.size()) - 1; d >= 0; --d) r = r * dims[size_t(d)] + idx[size_t(d)];
  return r;
}

void pool(const ops::PoolAttrs& at, KernelCtx& c) {
  const Tensor& X = c.in(0);
  int64_t planes = X.dims()[0] * X.dims()[1];
  Windows geometry(at.win, spatial(X.dims()), spatial(c.out(0).dims()));
  const int64_t in_size = geometry.in_size(), out_size = geometry.out_size();
  dispatch<kWideNumeric>(X.dtype(), c.node.where(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = X.data<T>();
    T* y = c.out(0).data<T>();
    int64_t* ind = c.wants(1) ? c.out(1).data<int64_t>() : nullptr;
    parallel_for(planes, out_size * geometry.kernel_size(), [&](int64_t pb, int64_t pe) {
      Windows w = geometry;
      std::vector<int64_t> offs;
      for (int64_t p = pb; p < pe; ++p)
        for (int64_t o = 0; o < out_size; ++o) {
          int64_t padded = w.at(o, &offs);
          double acc = at.max ? -INFINITY : 0;
          int64_t best = -1;
          for (int64_t off : offs) {
            double v = double(xp[p * in_size + off]);
            if (!at.max)
              acc += v;
            else if (v > acc || best < 0)
              acc = v, best = off;
          }
          if (at.max) {
            y[p * out_size + o] = from_double<T>(acc);  // -inf for a window of padding alone
            if (ind) ind[p * out_size + o] = p * in_size + (at.storage_order ? column_major(best, w.in_sizes()) : best);
          } else {
            int64_t div = at.include_pad ? padded : int64_t(offs.size());
            y[p * out_size + o] = from_double<T>(div ? acc / double(div) : 0.0);
          }
        }
    });
  });
}

void average_pool_grad(const ops::PoolAttrs& at, KernelCtx& c) {
  const Tensor& dY = c.in(0);
  Tensor& dX = c.out(0);
  int64_t planes = dX.dims()[0] * dX.dims()[1];
  Windows geometry(at.win, spatial(dX.dims()), spatial(dY.dims()));
  const int64_t in_size = geometry.in_size(), out_size = geometry.out_size();
  dispatch<kWideFloats>(dY.dtype(), c.node.where(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* dy = dY.data<T>();
    T* dx = dX.data<T>();
    parallel_for(planes, out_size * geometry.kernel_size(), [&](int64_t pb, int64_t pe) {
      Windows w = geometry;
      std::vector<int64_t> offs;
      std::fill(dx + pb * in_size, dx + pe * in_size, T(0));
      for (int64_t p = pb; p < pe; ++p)
        for (int64_t o = 0; o < out_size; ++o) {
          int64_t padded = w.at(o, &offs), div = at.include_pad ? padded : int64_t(offs.size());
          if (!div) continue;
          T share = T(double(dy[p * out_size + o]) / double(div));
          for (int64_t off : offs) dx[p * in_size + off] += share;
        }
    });
  });
}

void global_pool(KernelCtx& c, bool max) {
  const Tensor& X = c.in(0);
  int64_t planes = X.dims()[0] * X.dims()[1], size = X.numel() / std::max<int64_t>(planes, 1);
  dispatch<kWideFloats>(X.dtype(), c.node.where(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (int64_t p = 0; p < planes; ++p) {
      const T* row = X.data<T>() + p * size;
      double acc = max ? -INFINITY : 0;
      for (int64_t i = 0; i < size; ++i) acc = max ? std::max(acc, double(row[i])) : acc + double(row[i]);
      c.out(0).data<T>()[p] = T(max ? acc : acc / double(size));
    }
  });
}

const bool kRegistered = register_kernels(
    kCpu, {
              in_float32({"", "MaxPool", kernel(pool)}),
              in_float32({"", "AveragePool", kernel(pool)}),
              in_float32({"com.onnxtrain", "AveragePoolGrad", kernel(average_pool_grad)}),
              in_float32({"", "GlobalAveragePool", [](const ops::Op&, KernelCtx& c) { global_pool(c, false); }}),
              in_float32({"", "GlobalMaxPool", [](const ops::Op&, KernelCtx& c) { global_pool(c, true); }}),
          });

}  // namespace
}  // namespace onnxtrain::kernels
