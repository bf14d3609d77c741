// Reductions over a set of axes (ReduceSum, ReduceMean, ...) and over one axis (ArgMax, ArgMin).
#include "ops/reduce.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/parallel.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/strided_copy.h"
#include "kernels/cpu/vector_math.h"
#include "kernels/kernel.h"
#include "ops/axis_util.h"

namespace onnxtrain::kernels {
namespace {

using Kind = ops::ReduceAttrs::Kind;

// Integers accumulate in uint64_t: sums and products wrap around (signed overflow would be undefined).
template <typename T>
T reduce_row(Kind kind, const T* x, int64_t n) {
  using Acc = std::conditional_t<kFloat<T>, double, uint64_t>;
  auto as_double = [](Acc a) { return kFloat<T> ? double(a) : double(int64_t(a)); };
  switch (kind) {
    case Kind::kMax: {
      T m = n ? x[0] : std::numeric_limits<T>::lowest();
      if constexpr (kFloat<T>)
        if (!n) m = T(-INFINITY);
      for (int64_t i = 1; i < n; ++i) m = std::isnan(double(x[i])) || x[i] > m ? x[i] : m;
      return m;
    }
    case Kind::kMin: {
      T m = n ? x[0] : std::numeric_limits<T>::max();
      if constexpr (kFloat<T>)
        if (!n) m = T(INFINITY);
      for (int64_t i = 1; i < n; ++i) m = std::isnan(double(x[i])) || x[i] < m ? x[i] : m;
      return m;
    }
    case Kind::kProd: {
      Acc p = 1;
      for (int64_t i = 0; i < n; ++i) p *= Acc(x[i]);
      return T(p);
    }
    case Kind::kLogSumExp: {
      double m = -INFINITY;
      for (int64_t i = 0; i < n; ++i) m = std::max(m, double(x[i]));
      if (std::isinf(m)) return from_double<T>(m);
      double s = 0;
      for (int64_t i = 0; i < n; ++i) s += std::exp(double(x[i]) - m);
      return from_double<T>(m + std::log(s));
    }
    default:
      break;
  }
  if constexpr (std::is_same_v<T, float>) {
    if (kind == Kind::kSum || kind == Kind::kMean) {  // the common case, vectorised
      double sum = sum_f32(x, n);
      return kind == Kind::kSum ? T(sum) : n ? T(sum / double(n)) : T(NAN);
    }
  }
  Acc s = 0;
  for (int64_t i = 0; i < n; ++i) {
    Acc v = x[i] < T(0) && kind == Kind::kL1 ? Acc(0) - Acc(x[i]) : Acc(x[i]);
    if (kind == Kind::kL2 || kind == Kind::kSumSquare) v = v * v;
    s += v;
  }
  if (kind == Kind::kMean) return from_double<T>(n ? as_double(s) / double(n) : NAN);
  if (kind == Kind::kL2) return from_double<T>(std::sqrt(as_double(s)));
  if (kind == Kind::kLogSum) return from_double<T>(std::log(as_double(s)));
  return T(s);
}

// Summing leading axes (bias gradients: (B*T, C) -> C) runs down the columns, with no transposed copy.
bool leading_sum(const std::vector<bool>& m, Kind kind, DType t) {
  size_t lead = 0;
  while (lead < m.size() && m[lead]) ++lead;
  bool leading = lead > 0 && std::all_of(m.begin() + long(lead), m.end(), [](bool b) { return !b; });
  return leading && kind == Kind::kSum && dtype_is_float(t);
}

// Otherwise the reduced axes are moved last (a copy into scratch) unless they are last already.
bool moves(const std::vector<bool>& m, Kind kind, DType t) {
  bool trailing = std::is_sorted(m.begin(), m.end());  // kept axes (false) first, then reduced ones
  return !trailing && !leading_sum(m, kind, t);
}

void reduce(const ops::ReduceAttrs& at, KernelCtx& c) {
  auto m = at.mask(*c.shapes);
  const Tensor& x = c.in(0);
  // Move reduced axes last, then reduce rows of length `len`.
  std::vector<int64_t> perm, dims;
  for (size_t i = 0; i < m.size(); ++i)
    if (!m[i]) perm.push_back(int64_t(i));
  for (size_t i = 0; i < m.size(); ++i)
    if (m[i]) perm.push_back(int64_t(i));
  int64_t len = 1;
  for (size_t i = 0; i < m.size(); ++i)
    if (m[i]) len *= x.dims()[i];
  int64_t rows = c.out(0).numel();
  if (leading_sum(m, at.kind, x.dtype()))
    return dispatch<kFloats>(x.dtype(), c.node.where(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* src = x.data<T>();
      T* out = c.out(0).data<T>();
      // Blocks of 64 columns (whole cache lines), each summed down every row into double accumulators.
      constexpr int64_t kCols = 64;
      parallel_for((rows + kCols - 1) / kCols, len * kCols, [&](int64_t b, int64_t e) {
        for (int64_t block = b; block < e; ++block) {
          int64_t j0 = block * kCols, width = std::min(kCols, rows - j0);
          double acc[kCols] = {};
          for (int64_t r = 0; r < len; ++r) {
            const T* row = src + r * rows + j0;
            for (int64_t j = 0; j < width; ++j) acc[j] += double(row[j]);
          }
          for (int64_t j = 0; j < width; ++j) out[j0 + j] = T(acc[j]);
        }
      });
    });
  dispatch<kNumeric>(x.dtype(), c.node.where(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = x.data<T>();
    if (moves(m, at.kind, x.dtype())) {
      auto st = contiguous_strides(x.dims());
      std::vector<int64_t> pd, ps;
      for (auto p : perm) {
        pd.push_back(x.dims()[size_t(p)]);
        ps.push_back(st[size_t(p)]);
      }
      T* moved = c.scratch_as<T>(0, size_t(x.numel()));  // x with the reduced axes last
      strided_copy(moved, src, pd, ps);
      src = moved;
    }
    T* out = c.out(0).data<T>();
    parallel_for(rows, len, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) out[r] = reduce_row(at.kind, src + r * len, len);
    });
  });
}

void arg_reduce(const ops::ArgReduceAttrs& at, KernelCtx& c) {
  const Tensor& x = c.in(0);
  ops::AxisView v = ops::axis_view(x.dims(), at.axis < 0 ? at.axis + x.rank() : at.axis);
  int64_t* out = c.out(0).data<int64_t>();
  dispatch<kNumeric>(x.dtype(), c.node.where(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = x.data<T>();
    for (int64_t o = 0; o < v.outer; ++o)
      for (int64_t i = 0; i < v.inner; ++i) {
        const T* row = p + o * v.n * v.inner + i;
        int64_t best = 0;
        for (int64_t k = 1; k < v.n; ++k) {
          T a = row[k * v.inner], b = row[best * v.inner];
          bool better = at.max ? (at.last ? a >= b : a > b) : (at.last ? a <= b : a < b);
          if (better) best = k;
        }
        out[o * v.inner + i] = best;
      }
  });
}

Dim reduce_scratch(const ops::Op& op, ops::InferCtx& s) {
  const auto& at = attrs_of<ops::ReduceAttrs>(op);
  if (!moves(at.mask(s), at.kind, s.dtype(0))) return Dim(0);
  return shape_numel(s.shape(0)) * Dim(int64_t(dtype_size(s.dtype(0))));
}

const bool kRegistered = register_kernels(kCpu, {
                                                    {"", "ReduceSum", kernel(reduce), reduce_scratch},
                                                    {"", "ReduceMean", kernel(reduce), reduce_scratch},
                                                    {"", "ReduceMax", kernel(reduce), reduce_scratch},
                                                    {"", "ReduceMin", kernel(reduce), reduce_scratch},
                                                    {"", "ReduceProd", kernel(reduce), reduce_scratch},
                                                    {"", "ReduceL1", kernel(reduce), reduce_scratch},
                                                    {"", "ReduceL2", kernel(reduce), reduce_scratch},
                                                    {"", "ReduceSumSquare", kernel(reduce), reduce_scratch},
                                                    {"", "ReduceLogSum", kernel(reduce), reduce_scratch},
                                                    {"", "ReduceLogSumExp", kernel(reduce), reduce_scratch},
                                                    {"", "ArgMax", kernel(arg_reduce)},
                                                    {"", "ArgMin", kernel(arg_reduce)},
                                                });

}  // namespace
}  // namespace onnxtrain::kernels
