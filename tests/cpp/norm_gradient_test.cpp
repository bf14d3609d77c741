// The host's LayerNormalizationGrad and RMSNormalizationGrad (norm_gradient_rows.cpp) against the formulas in
// double, on both paths (AVX-512 and element by element), with a float32 or bfloat16 dY (autocast's, read as it is
// stored: bit for bit as the same values given in float32), with and without base, and the same at any thread count.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <random>

#include "core/cpu_features.h"
#include "test_graphs.h"

namespace onnxtrain {
namespace {

struct Inputs {
  Tensor dy, x, scale, mean, rstd, base;
};

Tensor normal(std::vector<int64_t> dims, std::mt19937& rng, float sd = 1, float mean = 0) {
  std::normal_distribution<float> d(mean, sd);
  Tensor t(DType::kFloat32, dims);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = float(BFloat16(d(rng)));  // (exact in bf16 too)
  return t;
}

Inputs inputs(bool layer_norm, int64_t rows, int64_t n) {
  std::mt19937 rng(5);
  Inputs in{normal({rows, n}, rng), normal({rows, n}, rng, 2, 0.5f), normal({n}, rng, 0.3f, 1), Tensor(),
            Tensor(DType::kFloat32, {rows, 1}), normal({rows, n}, rng)};
  if (layer_norm) in.mean = Tensor(DType::kFloat32, {rows, 1});
  for (int64_t i = 0; i < rows; ++i) {
    const float* x = in.x.data<float>() + i * n;
    double m = 0, v = 0;
    for (int64_t j = 0; j < n; ++j) m += layer_norm ? x[j] / double(n) : 0;
    for (int64_t j = 0; j < n; ++j) v += (x[j] - m) * (x[j] - m) / double(n);
    if (layer_norm) in.mean.data<float>()[i] = float(m);
    in.rstd.data<float>()[i] = float(1 / std::sqrt(v + 1e-5));
  }
  return in;
}

Tensor as_bf16(const Tensor& t) {
  Tensor r(DType::kBFloat16, t.dims());
  for (int64_t i = 0; i < t.numel(); ++i) r.data<BFloat16>()[i] = BFloat16(t.data<float>()[i]);
  return r;
}

// dX, dscale and (LayerNorm) dbias, with base where `with_base`.
std::vector<Tensor> run(bool layer_norm, const Inputs& in, const Tensor& dy, bool with_base) {
  const Tensor none;
  std::vector<Tensor> args{dy, in.x, in.scale};
  if (layer_norm) args.push_back(in.mean);
  args.push_back(in.rstd);
  if (with_base) args.push_back(in.base);
  return test_graphs::run_onnxtrain_node(layer_norm ? "LayerNormalizationGrad" : "RMSNormalizationGrad", args,
                                         {true, true, layer_norm}, {{"axis", int64_t(-1)}});
}

// The outputs against the formulas in double: dX within 1e-5 of its row's scale, the column sums within 1e-5 of
// the sum of their terms' magnitudes.
void expect_formulas(bool layer_norm, const Inputs& in, bool with_base, const std::vector<Tensor>& got) {
  const int64_t rows = in.x.dims()[0], n = in.x.dims()[1];
  std::vector<double> ds(static_cast<size_t>(n)), db = ds, ds_abs = ds, db_abs = ds;
  for (int64_t i = 0; i < rows; ++i) {
    const float *dy = in.dy.data<float>() + i * n, *x = in.x.data<float>() + i * n, *w = in.scale.data<float>();
    const double m = layer_norm ? in.mean.data<float>()[i] : 0, rs = in.rstd.data<float>()[i];
    double m1 = 0, m2 = 0;
    for (int64_t j = 0; j < n; ++j) {
      const double xhat = (x[j] - m) * rs;
      m1 += dy[j] * w[j] / double(n);
      m2 += dy[j] * w[j] * xhat / double(n);
      ds[size_t(j)] += dy[j] * xhat, ds_abs[size_t(j)] += std::abs(dy[j] * xhat);
      db[size_t(j)] += dy[j], db_abs[size_t(j)] += std::abs(dy[j]);
    }
    if (!layer_norm) m1 = 0;
    for (int64_t j = 0; j < n; ++j) {
      const double xhat = (x[j] - m) * rs;
      const double want = rs * (dy[j] * w[j] - m1 - xhat * m2) + (with_base ? in.base.data<float>()[i * n + j] : 0);
      ASSERT_NEAR(got[0].data<float>()[i * n + j], want, 1e-5 * (1 + rs)) << "dX at " << i << ", " << j;
    }
  }
  for (int64_t j = 0; j < n; ++j) {
    ASSERT_NEAR(got[1].data<float>()[j], ds[size_t(j)], 1e-5 * ds_abs[size_t(j)] + 1e-6) << "dscale at " << j;
    if (layer_norm) ASSERT_NEAR(got[2].data<float>()[j], db[size_t(j)], 1e-5 * db_abs[size_t(j)] + 1e-6) << j;
  }
}

void expect_identical(const std::vector<Tensor>& a, const std::vector<Tensor>& b, const char* what) {
  for (size_t k = 0; k < a.size(); ++k)
    if (a[k].defined())
      ASSERT_EQ(0, std::memcmp(a[k].raw(), b[k].raw(), size_t(a[k].numel()) * 4)) << what << ", output " << k;
}

// Both norms; rows over several blocks and not a multiple of them, rows whose last elements fill no full vector.
void check_this_path() {
  for (bool layer_norm : {true, false})
    for (auto [rows, n] : {std::pair<int64_t, int64_t>{6, 40}, {200, 768}, {70, 100}}) {
      SCOPED_TRACE(std::string(layer_norm ? "LayerNorm " : "RMSNorm ") + std::to_string(rows) + "x" +
                   std::to_string(n) + " on " + cpu::features().str());
      const Inputs in = inputs(layer_norm, rows, n);
      for (bool with_base : {false, true}) {
        const std::vector<Tensor> f32 = run(layer_norm, in, in.dy, with_base);
        expect_formulas(layer_norm, in, with_base, f32);
        expect_identical(f32, run(layer_norm, in, as_bf16(in.dy), with_base), "a bf16 dY");
        const int threads = omp_get_max_threads();
        omp_set_num_threads(1);
        const std::vector<Tensor> one = run(layer_norm, in, in.dy, with_base);
        omp_set_num_threads(threads);
        expect_identical(f32, one, "one thread");
      }
    }
}

TEST(NormGradient, ComputesTheFormulasOnThisCpu) { check_this_path(); }

TEST(NormGradient, ComputesTheFormulasElementByElement) {
  cpu::restrict_features(false, false);
  check_this_path();
  cpu::restrict_features(true, true);
}

}  // namespace
}  // namespace onnxtrain
