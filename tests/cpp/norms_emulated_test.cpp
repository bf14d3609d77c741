// The norms' kernels (kernels/cuda/layer_norm_kernels.cuh, rms_norm_kernels.cuh) run on the host through the warp
// emulation, against float64 references: LayerNorm's and RMSNorm's output, statistics, dX and dscale, for a
// float32 X with Y of float32 and of bf16 (norm_output_cast's), dY of float32 and of bf16 as Y's; a row a warp (some
// of the last block's warps past the rows) and a row a block, rows longer than either's threads, and LayerNorm's rows
// longer than a thread holds in registers; dscale summed over chunks of rows (LayerNorm's 8 columns a thread too, as
// a column a thread); dX plus a base written in the base's place.
#ifdef ONNXTRAIN_WITH_CUDA
#include "warp_emulation.h"  // first: the CUDA qualifiers for the host compiler
#include "kernels/cuda/layer_norm_kernels.cuh"
#include "kernels/cuda/rms_norm_kernels.cuh"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace onnxtrain::kernels::cuda {
namespace {

constexpr int64_t kRowCount = 9;
// Rows whose elements a thread holds in registers all (layer_norm_kernels.cuh's kHeld), and rows past them a warp's
// and a block's lanes read again.
constexpr int kShortRow = 300, kWarpLongRow = 1000, kBlockLongRow = 7000;
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
template <int kN, typename Partials>
std::vector<float> column_sums(Partials&& partials) {
  const Chunks ch = chunks_of(kRowCount);
  std::vector<float> partial(size_t(kRowChunks * kN * 2), 1e30f), out(static_cast<size_t>(kN), 1e30f);
  const dim3 grid = chunk_grid(kN, ch);
  testing::emulate(EmulatedIndex{grid.x, grid.y, 1}, kThreads, [&] { partials(partial.data(), ch); });
  testing::emulate(1, kThreads, [&] { sum_chunks_kernel<float>(partial.data(), ch.count, kN, 1.f, out.data()); });
  return out;
}

template <int kN>
struct Inputs {  // X, the scale, the bias, dY and a base of dX of every check, in float32
  std::vector<float> x = values(kRowCount * kN, 1, -3, 2), w = values(kN, 2, 0.5f, 1.5f), b = values(kN, 3, -1, 1),
                     dy = values(kRowCount * kN, 4, -1, 1), base = values(kRowCount * kN, 5, -1, 1);
};

// The blocks of a launch over kRowCount rows, a warp or a block a row.
template <typename Rows>
unsigned blocks() {
  return unsigned((kRowCount + Rows::kPerBlock - 1) / Rows::kPerBlock);
}

// dX written over a base (in its place) is the base plus dX as written without one, rounded as an Add rounds it.
void expect_based(const std::vector<float>& dx, const std::vector<float>& based, const std::vector<float>& base) {
  for (size_t i = 0; i < dx.size(); ++i) ASSERT_EQ(based[i], base[i] + dx[i]) << "dX plus the base at " << i;
}

template <typename Rows, typename Y, int kN = kShortRow>
void check_layer_norm() {
  const Inputs<kN> in;
  const std::vector<float> dy32 = [&] {  // dY as the kernel reads it: of Y's dtype
    std::vector<float> r = in.dy;
    for (float& v : r) v = to_float(from_float<Y>(v));
    return r;
  }();
  const std::vector<Y> dy = as<Y>(in.dy);
  std::vector<Y> y(size_t(kRowCount * kN));
  std::vector<float> mean(kRowCount), rstd(kRowCount), dx(size_t(kRowCount * kN));
  testing::emulate(blocks<Rows>(), kThreads, [&] {
    layer_norm_kernel<Rows, float, Y>(in.x.data(), in.w.data(), in.b.data(), y.data(), mean.data(), rstd.data(),
                                      kRowCount, kN, kN, kN, kEpsilon);
  });
  testing::emulate(blocks<Rows>(), kThreads, [&] {
    layer_norm_dx_kernel<Rows, float, Y>(dy.data(), in.x.data(), in.w.data(), mean.data(), rstd.data(), nullptr,
                                         dx.data(), kRowCount, kN);
  });
  std::vector<float> dx_base = in.base;
  testing::emulate(blocks<Rows>(), kThreads, [&] {
    layer_norm_dx_kernel<Rows, float, Y>(dy.data(), in.x.data(), in.w.data(), mean.data(), rstd.data(),
                                         dx_base.data(), dx_base.data(), kRowCount, kN);
  });
  const std::vector<float> dw = column_sums<kN>([&](float* partial, const Chunks& ch) {
    layer_norm_dw_kernel<float, Y>(dy.data(), in.x.data(), mean.data(), rstd.data(), partial,
                                   partial + int64_t(ch.count) * kN, kRowCount, kN, ch.rows);
  });
  std::vector<double> want_y(y.size()), want_dx(dx.size()), want_dw(static_cast<size_t>(kN), 0.0);
  for (int64_t r = 0; r < kRowCount; ++r) {
    const float* xr = in.x.data() + r * kN;
    double m = 0, v = 0, m1 = 0, m2 = 0;
    for (int64_t j = 0; j < kN; ++j) m += xr[j] / double(kN);
    for (int64_t j = 0; j < kN; ++j) v += (xr[j] - m) * (xr[j] - m) / double(kN);
    const double rs = 1 / std::sqrt(v + kEpsilon);
    EXPECT_NEAR(mean[size_t(r)], m, 1e-5);
    EXPECT_NEAR(rstd[size_t(r)], rs, 1e-5 * rs);
    for (int64_t j = 0; j < kN; ++j) {
      const double xhat = (xr[j] - m) * rs, g = dy32[size_t(r * kN + j)] * double(in.w[size_t(j)]);
      want_y[size_t(r * kN + j)] = xhat * in.w[size_t(j)] + in.b[size_t(j)];
      m1 += g / double(kN), m2 += g * xhat / double(kN);
      want_dw[size_t(j)] += dy32[size_t(r * kN + j)] * xhat;
    }
    for (int64_t j = 0; j < kN; ++j) {
      const double xhat = (xr[j] - m) * rs, g = dy32[size_t(r * kN + j)] * double(in.w[size_t(j)]);
      want_dx[size_t(r * kN + j)] = rs * (g - m1 - xhat * m2);
    }
  }
  expect_near(y, want_y, std::is_same_v<Y, float> ? 1e-5 : 1.0 / 128, "Y");
  expect_near(dx, want_dx, 1e-5, "dX");
  expect_based(dx, dx_base, in.base);
  expect_near(dw, want_dw, 1e-5, "dscale");
}

template <typename Rows, typename Y, int kN = kShortRow>
void check_rms_norm() {
  const Inputs<kN> in;
  const std::vector<Y> dy = as<Y>(in.dy);
  std::vector<Y> y(size_t(kRowCount * kN));
  std::vector<float> rstd(kRowCount), dx(size_t(kRowCount * kN));
  testing::emulate(blocks<Rows>(), kThreads, [&] {
    rms_norm_kernel<Rows, float, Y>(in.x.data(), in.w.data(), y.data(), rstd.data(), kRowCount, kN, kEpsilon);
  });
  testing::emulate(blocks<Rows>(), kThreads, [&] {
    rms_norm_dx_kernel<Rows, float, Y>(dy.data(), in.x.data(), in.w.data(), rstd.data(), nullptr, dx.data(),
                                       kRowCount, kN);
  });
  std::vector<float> dx_base = in.base;
  testing::emulate(blocks<Rows>(), kThreads, [&] {
    rms_norm_dx_kernel<Rows, float, Y>(dy.data(), in.x.data(), in.w.data(), rstd.data(), dx_base.data(),
                                       dx_base.data(), kRowCount, kN);
  });
  const std::vector<float> dw = column_sums<kN>([&](float* partial, const Chunks& ch) {
    rms_norm_dw_kernel<float, Y>(dy.data(), in.x.data(), rstd.data(), partial, kRowCount, kN, ch.rows);
  });
  std::vector<double> want_y(y.size()), want_dx(dx.size()), want_dw(static_cast<size_t>(kN), 0.0);
  for (int64_t r = 0; r < kRowCount; ++r) {
    const float* xr = in.x.data() + r * kN;
    double ms = 0, k = 0;
    for (int64_t j = 0; j < kN; ++j) ms += double(xr[j]) * xr[j] / double(kN);
    const double rs = 1 / std::sqrt(ms + kEpsilon);
    EXPECT_NEAR(rstd[size_t(r)], rs, 1e-5 * rs);
    for (int64_t j = 0; j < kN; ++j) {
      const double d = to_float(dy[size_t(r * kN + j)]);
      want_y[size_t(r * kN + j)] = xr[j] * rs * in.w[size_t(j)];
      k += d * in.w[size_t(j)] * xr[j] / double(kN) * rs * rs;
      want_dw[size_t(j)] += d * xr[j] * rs;
    }
    for (int64_t j = 0; j < kN; ++j)
      want_dx[size_t(r * kN + j)] = rs * (to_float(dy[size_t(r * kN + j)]) * in.w[size_t(j)] - xr[j] * k);
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
  check_layer_norm<WarpRows, __nv_bfloat16, kWarpLongRow>();
  check_layer_norm<BlockRows, float, kBlockLongRow>();
}

TEST(NormKernels, RMSNormOfFloat32WithYAndDYOfFloat32OrBf16) {
  check_rms_norm<WarpRows, float>();
  check_rms_norm<WarpRows, __nv_bfloat16>();
  check_rms_norm<BlockRows, float>();
  check_rms_norm<BlockRows, __nv_bfloat16>();
}

}  // namespace
}  // namespace onnxtrain::kernels::cuda
#endif
