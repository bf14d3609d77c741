// The norms' kernels (kernels/cuda/layer_norm_kernels.cuh, rms_norm_kernels.cuh) run on the host through the warp
// emulation, against float64 references: LayerNorm's and RMSNorm's output, statistics, dX and dscale, for a
// float32 X with Y of float32 and of bf16 (norm_output_cast's), dY of float32 and of bf16 as Y's; a row a warp (some
// of the last block's warps past the rows) and a row a block, rows longer than either's threads, and LayerNorm's rows
// longer than a thread holds in registers; dscale summed over chunks of rows (LayerNorm's 8 columns a thread too, as
// a column a thread); dX plus a base written in the base's place; and random cases of these (random_cases.h).
#ifdef ONNXTRAIN_WITH_CUDA
#include "warp_emulation.h"  // first: the CUDA qualifiers for the host compiler
#include "kernels/cuda/layer_norm_kernels.cuh"
#include "kernels/cuda/rms_norm_kernels.cuh"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "random_cases.h"

namespace onnxtrain::kernels::cuda {
namespace {

// Rows whose elements a thread holds in registers all (layer_norm_kernels.cuh's kHeld), and rows past them a warp's
// and a block's lanes read again; 9 of each unless a case says otherwise.
constexpr int kShortRow = 300, kWarpLongRow = 1000, kBlockLongRow = 7000;
struct Sizes {
  int64_t rows = 9;
  int n = kShortRow;
};
constexpr float kEpsilon = 1e-5f;

std::vector<float> values(int64_t count, uint32_t seed, float lo, float hi) {
  std::vector<float> v(static_cast<size_t>(count));
  for (float& x : v) {
    seed = seed * 1664525u + 1013904223u;
    x = lo + (hi - lo) * float(seed >> 8) / float(1 << 24);
  }
  return v;
}

template <typename T>
std::vector<T> as(const std::vector<float>& v) {
  std::vector<T> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = from_float<T>(v[i]);
  return r;
}

// Every element within `tolerance` times the largest magnitude the reference holds.
template <typename T>
void expect_near(const std::vector<T>& got, const std::vector<double>& want, double tolerance, const char* what) {
  double scale = 0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(double(to_float(got[i])), want[i], tolerance * scale) << what << " at " << i;
}

// The per-column sums of a norm's dscale (or dbias) kernel's partial sums, as the launch adds them.
template <typename Partials>
std::vector<float> column_sums(const Sizes& z, Partials&& partials) {
  const Chunks ch = chunks_of(z.rows);
  std::vector<float> partial(size_t(kRowChunks * z.n * 2), 1e30f), out(static_cast<size_t>(z.n), 1e30f);
  const dim3 grid = chunk_grid(z.n, ch);
  testing::emulate(EmulatedIndex{grid.x, grid.y, 1}, kThreads, [&] { partials(partial.data(), ch); });
  testing::emulate(1, kThreads, [&] { sum_chunks_kernel<float>(partial.data(), ch.count, z.n, 1.f, out.data()); });
  return out;
}

struct Inputs {  // X, the scale, the bias, dY and a base of dX of every check, in float32
  explicit Inputs(const Sizes& z)
      : x(values(z.rows * z.n, 1, -3, 2)), w(values(z.n, 2, 0.5f, 1.5f)), b(values(z.n, 3, -1, 1)),
        dy(values(z.rows * z.n, 4, -1, 1)), base(values(z.rows * z.n, 5, -1, 1)) {}
  std::vector<float> x, w, b, dy, base;
};

// The blocks of a launch over the rows, a warp or a block a row.
template <typename Rows>
unsigned blocks(const Sizes& z) {
  return unsigned((z.rows + Rows::kPerBlock - 1) / Rows::kPerBlock);
}

// dX written over a base (in its place) is the base plus dX as written without one, rounded as an Add rounds it.
void expect_based(const std::vector<float>& dx, const std::vector<float>& based, const std::vector<float>& base) {
  for (size_t i = 0; i < dx.size(); ++i) ASSERT_EQ(based[i], base[i] + dx[i]) << "dX plus the base at " << i;
}

template <typename Rows, typename Y>
void check_layer_norm(const Sizes& z = {}) {
  const int64_t rows = z.rows;
  const int n = z.n;
  const Inputs in(z);
  const std::vector<float> dy32 = [&] {  // dY as the kernel reads it: of Y's dtype
    std::vector<float> r = in.dy;
    for (float& v : r) v = to_float(from_float<Y>(v));
    return r;
  }();
  const std::vector<Y> dy = as<Y>(in.dy);
  std::vector<Y> y(size_t(rows * n));
  std::vector<float> mean(rows), rstd(rows), dx(size_t(rows * n));
  testing::emulate(blocks<Rows>(z), kThreads, [&] {
    layer_norm_kernel<Rows, float, Y>(in.x.data(), in.w.data(), in.b.data(), y.data(), mean.data(), rstd.data(),
                                      rows, n, n, n, kEpsilon);
  });
  testing::emulate(blocks<Rows>(z), kThreads, [&] {
    layer_norm_dx_kernel<Rows, float, Y>(dy.data(), in.x.data(), in.w.data(), mean.data(), rstd.data(), nullptr,
                                         dx.data(), rows, n);
  });
  std::vector<float> dx_base = in.base;
  testing::emulate(blocks<Rows>(z), kThreads, [&] {
    layer_norm_dx_kernel<Rows, float, Y>(dy.data(), in.x.data(), in.w.data(), mean.data(), rstd.data(),
                                         dx_base.data(), dx_base.data(), rows, n);
  });
  const std::vector<float> dw = column_sums(z, [&](float* partial, const Chunks& ch) {
    layer_norm_dw_kernel<float, Y>(dy.data(), in.x.data(), mean.data(), rstd.data(), partial,
                                   partial + int64_t(ch.count) * n, rows, n, ch.rows);
  });
  std::vector<double> want_y(y.size()), want_dx(dx.size()), want_dw(static_cast<size_t>(n), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = in.x.data() + r * n;
    double m = 0, v = 0, m1 = 0, m2 = 0;
    for (int64_t j = 0; j < n; ++j) m += xr[j] / double(n);
    for (int64_t j = 0; j < n; ++j) v += (xr[j] - m) * (xr[j] - m) / double(n);
    const double rs = 1 / std::sqrt(v + kEpsilon);
    EXPECT_NEAR(mean[size_t(r)], m, 1e-5);
    EXPECT_NEAR(rstd[size_t(r)], rs, 1e-5 * rs);
    for (int64_t j = 0; j < n; ++j) {
      const double xhat = (xr[j] - m) * rs, g = dy32[size_t(r * n + j)] * double(in.w[size_t(j)]);
      want_y[size_t(r * n + j)] = xhat * in.w[size_t(j)] + in.b[size_t(j)];
      m1 += g / double(n), m2 += g * xhat / double(n);
      want_dw[size_t(j)] += dy32[size_t(r * n + j)] * xhat;
    }
    for (int64_t j = 0; j < n; ++j) {
      const double xhat = (xr[j] - m) * rs, g = dy32[size_t(r * n + j)] * double(in.w[size_t(j)]);
      want_dx[size_t(r * n + j)] = rs * (g - m1 - xhat * m2);
    }
  }
  expect_near(y, want_y, std::is_same_v<Y, float> ? 1e-5 : 1.0 / 128, "Y");
  expect_near(dx, want_dx, 1e-5, "dX");
  expect_based(dx, dx_base, in.base);
  expect_near(dw, want_dw, 1e-5, "dscale");
}

template <typename Rows, typename Y>
void check_rms_norm(const Sizes& z = {}) {
  const int64_t rows = z.rows;
  const int n = z.n;
  const Inputs in(z);
  const std::vector<Y> dy = as<Y>(in.dy);
  std::vector<Y> y(size_t(rows * n));
  std::vector<float> rstd(rows), dx(size_t(rows * n));
  testing::emulate(blocks<Rows>(z), kThreads, [&] {
    rms_norm_kernel<Rows, float, Y>(in.x.data(), in.w.data(), y.data(), rstd.data(), rows, n, kEpsilon);
  });
  testing::emulate(blocks<Rows>(z), kThreads, [&] {
    rms_norm_dx_kernel<Rows, float, Y>(dy.data(), in.x.data(), in.w.data(), rstd.data(), nullptr, dx.data(),
                                       rows, n);
  });
  std::vector<float> dx_base = in.base;
  testing::emulate(blocks<Rows>(z), kThreads, [&] {
    rms_norm_dx_kernel<Rows, float, Y>(dy.data(), in.x.data(), in.w.data(), rstd.data(), dx_base.data(),
                                       dx_base.data(), rows, n);
  });
  const std::vector<float> dw = column_sums(z, [&](float* partial, const Chunks& ch) {
    rms_norm_dw_kernel<float, Y>(dy.data(), in.x.data(), rstd.data(), partial, rows, n, ch.rows);
  });
  std::vector<double> want_y(y.size()), want_dx(dx.size()), want_dw(static_cast<size_t>(n), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = in.x.data() + r * n;
    double ms = 0, k = 0;
    for (int64_t j = 0; j < n; ++j) ms += double(xr[j]) * xr[j] / double(n);
    const double rs = 1 / std::sqrt(ms + kEpsilon);
    EXPECT_NEAR(rstd[size_t(r)], rs, 1e-5 * rs);
    for (int64_t j = 0; j < n; ++j) {
      const double d = to_float(dy[size_t(r * n + j)]);
      want_y[size_t(r * n + j)] = xr[j] * rs * in.w[size_t(j)];
      k += d * in.w[size_t(j)] * xr[j] / double(n) * rs * rs;
      want_dw[size_t(j)] += d * xr[j] * rs;
    }
    for (int64_t j = 0; j < n; ++j)
      want_dx[size_t(r * n + j)] = rs * (to_float(dy[size_t(r * n + j)]) * in.w[size_t(j)] - xr[j] * k);
  }
  expect_near(y, want_y, std::is_same_v<Y, float> ? 1e-5 : 1.0 / 128, "Y");
  expect_near(dx, want_dx, 1e-5, "dX");
  expect_based(dx, dx_base, in.base);
  expect_near(dw, want_dw, 1e-5, "dscale");
}

// LayerNorm's dscale and dbias partial sums 8 columns a thread (rows of a multiple of 8 elements, dY and X aligned to
// packs) are those of a thread a column, bit for bit: columns past a block's 256, a last chunk shorter than the others.
template <typename D>
void check_wide_dw(int64_t rows, int n) {
  const std::vector<float> dy32 = values(rows * n, 7, -1, 1), x32 = values(rows * n, 8, -3, 2);
  const std::vector<float> mean = values(rows, 9, -0.5f, 0.5f), rstd = values(rows, 10, 0.5f, 2);
  const std::vector<D> dy16 = as<D>(dy32);
  const testing::Aligned<D> dy(rows * n, dy16.data());
  const testing::Aligned<float> x(rows * n, x32.data());
  const Chunks ch = chunks_of(rows);
  const int64_t parts = int64_t(ch.count) * n;
  std::vector<float> one(size_t(2 * parts), 1e30f), wide(size_t(2 * parts), 2e30f);
  dim3 grid = chunk_grid(n, ch);
  testing::emulate(EmulatedIndex{grid.x, grid.y, 1}, kThreads, [&] {
    layer_norm_dw_kernel<float, D>(dy.p, x.p, mean.data(), rstd.data(), one.data(), one.data() + parts, rows, n,
                                   ch.rows);
  });
  grid = wide_chunk_grid(n, ch);
  testing::emulate(EmulatedIndex{grid.x, grid.y, 1}, kThreads, [&] {
    layer_norm_dw_wide_kernel<float, D>(dy.p, x.p, mean.data(), rstd.data(), wide.data(), wide.data() + parts, rows,
                                        n, ch.rows);
  });
  for (size_t i = 0; i < one.size(); ++i) ASSERT_EQ(wide[i], one[i]) << rows << " rows of " << n << ", partial " << i;
}

TEST(NormKernels, LayerNormsScaleAndBiasGradientsEightColumnsAThreadAsOneAtATime) {
  check_wide_dw<float>(300, 264);
  check_wide_dw<__nv_bfloat16>(700, 520);
}

TEST(NormKernels, LayerNormOfFloat32WithYAndDYOfFloat32OrBf16) {
  check_layer_norm<WarpRows, float>();
  check_layer_norm<WarpRows, __nv_bfloat16>();
  check_layer_norm<BlockRows, float>();
  check_layer_norm<BlockRows, __nv_bfloat16>();
  check_layer_norm<WarpRows, __nv_bfloat16>({9, kWarpLongRow});
  check_layer_norm<BlockRows, float>({9, kBlockLongRow});
}

TEST(NormKernels, RMSNormOfFloat32WithYAndDYOfFloat32OrBf16) {
  check_rms_norm<WarpRows, float>();
  check_rms_norm<WarpRows, __nv_bfloat16>();
  check_rms_norm<BlockRows, float>();
  check_rms_norm<BlockRows, __nv_bfloat16>();
}

// Random cases (random_cases.h): a warp or a block a row over 1 to 40 rows of 4 to 3,000 elements (a block's rows up
// to 9,000), Y and dY of float32 or bf16; LayerNorm's wide partial sums over rows of a multiple of 8 elements. (Rows
// of 1 cancel: RMSNorm's dX is then tiny beside dY, and float32's rounding of it exceeds the tolerance.)
TEST(NormKernels, RandomCasesComputeAsInFloat64) {
  testing::for_random_seeds(6, [](testing::Draws& d) {
    const bool block = d.below(2), bf16 = d.below(2), rms = d.below(2);
    const Sizes z{1 + d.below(40), int(4 + (d.below(3) ? d.below(block ? 9000 : 3000) : d.below(64)))};
    SCOPED_TRACE(std::string(rms ? "RMSNorm" : "LayerNorm") + (block ? ", a block" : ", a warp") + " a row, " +
                 std::to_string(z.rows) + " rows of " + std::to_string(z.n) + (bf16 ? ", bf16 Y" : ", float32 Y"));
    auto check = [&]<typename Rows, typename Y>() {
      rms ? check_rms_norm<Rows, Y>(z) : check_layer_norm<Rows, Y>(z);
    };
    if (block)
      bf16 ? check.template operator()<BlockRows, __nv_bfloat16>() : check.template operator()<BlockRows, float>();
    else
      bf16 ? check.template operator()<WarpRows, __nv_bfloat16>() : check.template operator()<WarpRows, float>();
    const int64_t rows = 1 + d.below(900);
    const int n = int(8 * (1 + d.below(400)));
    bf16 ? check_wide_dw<__nv_bfloat16>(rows, n) : check_wide_dw<float>(rows, n);
  });
}

}  // namespace
}  // namespace onnxtrain::kernels::cuda
#endif
