// The vectorised float32 exp, erf and GELU against libm in double precision.
#include "kernels/cpu/vector_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "core/cpu_features.h"

using namespace onnxtrain;

namespace {

std::vector<float> sweep(float lo, float hi, int n) {
  std::vector<float> x(size_t(n) + 3);  // not a multiple of 8: the padded tail is exercised too
  for (size_t i = 0; i < x.size(); ++i) x[i] = lo + (hi - lo) * float(i) / float(x.size() - 1);
  return x;
}

}  // namespace

TEST(VectorMath, ExpIsWithinAFewUlpsOverTheWholeRange) {
  auto x = sweep(-87.f, 88.5f, 200000);
  std::vector<float> y(x.size());
  kernels::exp_f32(x.data(), y.data(), int64_t(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    double want = std::exp(double(x[i]));
    ASSERT_NEAR(y[i] / want, 1.0, 4e-7) << "exp(" << x[i] << ")";
  }
  float edge[] = {
      -1000.f,       -88.f, 89.f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
      std::nanf(""), 0.f};
  float out[7];
  kernels::exp_f32(edge, out, 7);
  EXPECT_EQ(out[0], 0.f);
  EXPECT_LT(out[1], 1e-37f);
  EXPECT_TRUE(std::isinf(out[2]) && std::isinf(out[3]));
  EXPECT_EQ(out[4], 0.f);
  EXPECT_TRUE(std::isnan(out[5]));
  EXPECT_EQ(out[6], 1.f);
}

// The AVX-512 path (sixteen at a time, a masked tail) gives the AVX2 path's values bit for bit.
TEST(VectorMath, ExpIsTheSameOnEveryPath) {
  auto x = sweep(-100.f, 100.f, 100000);
  x.insert(x.end(), {std::nanf(""), std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                     -87.33f, -87.34f, 88.72f, 88.73f, -0.f});
  std::vector<float> wide(x.size()), narrow(x.size());
  cpu::restrict_features(true, true);
  kernels::exp_f32(x.data(), wide.data(), int64_t(x.size()));
  cpu::restrict_features(false, false);
  kernels::exp_f32(x.data(), narrow.data(), int64_t(x.size()));
  cpu::restrict_features(true, true);
  EXPECT_EQ(std::memcmp(wide.data(), narrow.data(), x.size() * sizeof(float)), 0);
  for (size_t i = 0; i < x.size(); ++i)
    if (std::memcmp(&wide[i], &narrow[i], sizeof(float)))
      ADD_FAILURE() << "exp(" << x[i] << "): " << wide[i] << " against " << narrow[i];
}

// GELU's tanh form, its gradient and both at once: the AVX-512 path's values are the AVX2 path's, bit for bit, and
// both at once are the two apart (with dx written over dy and y over x).
TEST(VectorMath, TanhGeluIsTheSameOnEveryPathAndAtOnce) {
  const auto x = sweep(-12.f, 12.f, 20000), dy = sweep(-2.f, 3.f, 20000);
  const size_t n = x.size();
  std::vector<float> y[2], dx[2], both_dx[2], both_y[2];
  for (int wide = 0; wide < 2; ++wide) {
    cpu::restrict_features(wide, wide);
    y[wide].resize(n), dx[wide].resize(n);
    kernels::gelu_tanh_f32(x.data(), y[wide].data(), int64_t(n));
    kernels::gelu_tanh_grad_f32(dy.data(), x.data(), dx[wide].data(), int64_t(n));
    both_dx[wide] = dy, both_y[wide] = x;
    kernels::gelu_tanh_and_grad_f32(both_dx[wide].data(), both_y[wide].data(), both_dx[wide].data(),
                                    both_y[wide].data(), int64_t(n));
  }
  cpu::restrict_features(true, true);
  for (const auto* v : {&y, &dx, &both_dx, &both_y})
    EXPECT_EQ(std::memcmp((*v)[0].data(), (*v)[1].data(), n * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(both_y[1].data(), y[1].data(), n * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(both_dx[1].data(), dx[1].data(), n * sizeof(float)), 0);
}

TEST(VectorMath, ErfAndGeluMatchLibm) {
  auto x = sweep(-7.f, 7.f, 200000);
  std::vector<float> e(x.size()), g(x.size());
  kernels::erf_f32(x.data(), e.data(), int64_t(x.size()));
  kernels::gelu_f32(x.data(), g.data(), int64_t(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    double want = std::erf(double(x[i]));
    ASSERT_NEAR(e[i], want, 3e-7 + 2e-7 * std::abs(want)) << "erf(" << x[i] << ")";
    if (std::abs(x[i]) < 1 && x[i] != 0) {  // relative near 0
      ASSERT_NEAR(e[i] / want, 1.0, 1e-6) << "erf(" << x[i] << ")";
    }
    double gelu = 0.5 * x[i] * (1 + std::erf(x[i] / std::sqrt(2.0)));
    ASSERT_NEAR(g[i], gelu, 4e-7 * std::max(1.0, std::abs(double(x[i])))) << "gelu(" << x[i] << ")";
  }
  float tiny[] = {1e-30f, -1e-20f, std::nanf("")};
  float out[3];
  kernels::erf_f32(tiny, out, 3);
  EXPECT_NEAR(out[0] / (1.1283791670955126 * 1e-30), 1.0, 1e-6);
  EXPECT_LT(out[1], 0.f);
  EXPECT_TRUE(std::isnan(out[2]));
}

TEST(VectorMath, AnElementsResultDoesNotDependOnItsPosition) {
  auto x = sweep(-5.f, 5.f, 1000);
  std::vector<float> whole(x.size()), part(x.size());
  kernels::gelu_f32(x.data(), whole.data(), int64_t(x.size()));
  for (size_t start : {1, 3, 7}) {  // shifted so that vector lanes and the tail fall elsewhere
    kernels::gelu_f32(x.data() + start, part.data() + start, int64_t(x.size() - start));
    for (size_t i = start; i < x.size(); ++i) ASSERT_EQ(part[i], whole[i]) << i;
  }
}

TEST(VectorMath, SoftmaxRowsMatchDoublePrecision) {
  for (int64_t n : {1, 7, 8, 13, 128, 1000}) {
    std::vector<float> x(static_cast<size_t>(n)), y(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) x[size_t(i)] = float((i * 37) % 23) * 0.7f - 8.f + (i == 3 ? -INFINITY : 0.f);
    kernels::softmax_f32(x.data(), y.data(), n);
    double m = -INFINITY, sum = 0;
    for (float v : x) m = std::max(m, double(v));
    for (float v : x) sum += std::exp(double(v) - m);
    for (int64_t i = 0; i < n; ++i) {
      double want = std::exp(double(x[size_t(i)]) - m) / sum;
      ASSERT_NEAR(y[size_t(i)], want, 1e-6 * want + 1e-12) << "n " << n << " i " << i;
    }
  }
  std::vector<float> masked(5, -INFINITY), out(5);
  kernels::softmax_f32(masked.data(), out.data(), 5);
  for (float v : out) EXPECT_TRUE(std::isnan(v));  // as 0/0
}

// Causal rows (each a prefix unmasked) with fills that do and do not vanish under exp, a fully masked row too:
// the masked softmax equals the softmax of the masked row bit for bit, skipped vectors included.
TEST(VectorMath, MaskedSoftmaxEqualsSoftmaxOfTheMaskedRow) {
  const float scale = 0.125f;
  for (float fill : {-INFINITY, std::numeric_limits<float>::lowest(), -1e4f, -3.f})
    for (int64_t n : {5, 8, 37, 128})
      for (int64_t open = 0; open <= n; open += std::max<int64_t>(1, n / 7)) {
        std::vector<float> x(static_cast<size_t>(n)), want(x), got(x);
        std::unique_ptr<bool[]> c(new bool[size_t(n)]);
        for (int64_t i = 0; i < n; ++i) {
          x[size_t(i)] = float((i * 53) % 31) * 0.9f - 12.f;
          c[size_t(i)] = i >= open;
          want[size_t(i)] = c[size_t(i)] ? fill : x[size_t(i)] * scale;
        }
        kernels::softmax_f32(want.data(), want.data(), n);
        kernels::masked_softmax_f32(x.data(), c.get(), scale, fill, got.data(), n);
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(std::memcmp(&got[size_t(i)], &want[size_t(i)], 4), 0)
              << "fill " << fill << " n " << n << " open " << open << " i " << i << ": " << got[size_t(i)] << " vs "
              << want[size_t(i)];
      }
}

TEST(VectorMath, MaskedSoftmaxGradMatchesDoublePrecision) {
  for (int64_t n : {1, 8, 13, 128}) {
    std::vector<float> dy(static_cast<size_t>(n)), y(dy), dx(dy);
    std::unique_ptr<bool[]> c(new bool[size_t(n)]);
    for (int64_t i = 0; i < n; ++i) {
      dy[size_t(i)] = float((i * 29) % 17) * 0.1f - 0.8f;
      y[size_t(i)] = float((i * 7) % 11 + 1) / float(6 * n);
      c[size_t(i)] = i % 3 == 1;
    }
    kernels::masked_softmax_grad_f32(dy.data(), y.data(), c.get(), 0.125f, dx.data(), n);
    double dot = 0;
    for (int64_t i = 0; i < n; ++i) dot += double(dy[size_t(i)]) * double(y[size_t(i)]);
    for (int64_t i = 0; i < n; ++i) {
      double want = c[size_t(i)] ? 0.0 : double(y[size_t(i)]) * (double(dy[size_t(i)]) - dot) * 0.125;
      ASSERT_NEAR(dx[size_t(i)], want, 1e-6 * (1 + std::abs(want))) << "n " << n << " i " << i;
      if (c[size_t(i)]) {
        ASSERT_EQ(dx[size_t(i)], 0.f);
      }
    }
  }
}

TEST(VectorMath, MaxAndMaskedScaleOfEveryLengthAndTail) {
  for (int64_t n : {0, 1, 7, 8, 9, 31, 100}) {
    std::vector<float> x(static_cast<size_t>(n)), y(static_cast<size_t>(n));
    std::unique_ptr<bool[]> c(new bool[size_t(n) + 1]);
    float want = -INFINITY;
    for (int64_t i = 0; i < n; ++i) {
      x[size_t(i)] = float((i * 37) % 11) - 5.f + (i == n - 1 ? 20.f : 0.f);  // the largest last: the tail counts
      want = std::max(want, x[size_t(i)]);
      c[size_t(i)] = i % 4 == 2;
    }
    EXPECT_EQ(kernels::max_f32(x.data(), n), want) << "n " << n;
    kernels::masked_scale_f32(x.data(), c.get(), 0.5f, -INFINITY, y.data(), n);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(y[size_t(i)], c[size_t(i)] ? -INFINITY : x[size_t(i)] * 0.5f) << "n " << n << " i " << i;
  }
}
