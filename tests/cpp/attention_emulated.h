// The tiled FlashAttention kernels on the host through the warp emulation (tests/cpp/warp_emulation.h), against
// attention computed here in float64 from the same operands: a case's shapes, layouts, mask, bias and dropout
// (Case), its operands, its run of the kernels (the tensor-core ones of attention_mma.cuh for 16-bit T, the float32
// ones of attention_f32.cuh for float) and the comparison (Emulated<T>::check). Included by the emulated tests after
// warp_emulation.h, ONNXTRAIN_MMA_ATTENTION naming the kernels' host copy.
#pragma once
#include "kernels/cuda/attention_f32.cuh"
#include "kernels/cuda/attention_mma.cuh"
#include "kernels/cuda/attention_warp_rows.cuh"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <type_traits>
#include <vector>

namespace onnxtrain::kernels::cuda {
namespace {

namespace tc = ONNXTRAIN_MMA_ATTENTION;

struct Case {
  int64_t batch = 1, heads = 2, groups = 1, tq = 70, tk = 90, d = 64, dv = 64;
  bool causal = true, bias = false, causal_bias = false, zero_masked_rows = false;  // causal_bias: -inf above
  bool zero_below = false;  // the bias 0 on and under the diagonal: a causal mask as the exporter's additive one
  float fill = -30.f, dropout = 0.f;
  int64_t masked_row = -1;  // a row masked whole
  int64_t shift = 0;  // batch b's mask and bias b * shift keys to the right: a map a batch (else one for all pairs)
  bool scan_pairs = false;  // the backward finds the pairs reading its K and V by trying each (not space_kv_pairs)
  bool general = false;     // the kernels' general build alone (attention_builds.cuh), as ONNXTRAIN_CUDA_ATTENTION=...
  int mixed = -1;           // whether the map must have a mixed tile (the general build then runs): -1 either
  bool sequence_major = false;  // Q, K, V and Y (and their gradients) as (B, T, H, d)
  bool packed = false;  // Q, K and V side by side in one X (B, T, (H + 2 Hkv) d), dQ, dK and dV in dX (tq = tk, d = dv)
  bool warp_rows = false;  // the warp-per-row kernels (attention_warp_rows.cuh), heads of any size
};

template <typename T>
struct Emulated {
  explicit Emulated(const Case& c) : c(c) {}
  const Case c;
  int64_t pairs() const { return c.batch * c.heads; }
  int64_t slices() const { return c.shift ? c.batch : 1; }
  // Score (r, j) of pair `pair` in the mask and the bias, and batch b's diagonal's first key past row r.
  size_t at(int64_t pair, int64_t r, int64_t j) const {
    return size_t((c.shift ? pair / c.heads * c.tq * c.tk : 0) + r * c.tk + j);
  }
  int64_t past_diagonal(int64_t b, int64_t r) const { return r + 1 + b * c.shift; }
  int64_t kv_count() const { return c.batch * c.heads / c.groups; }
  // The rows of an operand of `heads` heads of n elements: (B, H, T, n), or (B, T, H, n).
  AttentionRows rows(int64_t heads, int64_t t, int64_t n) const {
    return c.sequence_major ? attention_rows({c.batch, t, heads, n}, true)
                            : attention_rows({c.batch, heads, t, n}, false);
  }

  static T from(double x) { return from_float<T>(float(x)); }
  static double value(T x) { return to_float(x); }

  std::vector<T> random(int64_t n, uint32_t seed) const {
    std::vector<T> v(static_cast<size_t>(n));
    for (auto& x : v) {
      seed = seed * 1664525u + 1013904223u;
      x = from(double(seed >> 8) / double(1 << 24) * 2. - 1.);
    }
    return v;
  }

  Attention describe(const T* scale, const bool* cond, const T* fill, const T* bias) const {
    Attention a;
    a.pairs = pairs(), a.tq = c.tq, a.tk = c.tk, a.d = c.d, a.dv = c.dv, a.kv_count = kv_count();
    a.kv_heads = c.heads / c.groups, a.groups = c.groups;
    a.q = rows(c.heads, c.tq, c.d), a.k = rows(a.kv_heads, c.tk, c.d), a.v = rows(a.kv_heads, c.tk, c.dv);
    a.y = rows(c.heads, c.tq, c.dv);
    a.sums = a.q;
    if (c.packed) {
      const int64_t width = (c.heads + 2 * a.kv_heads) * c.d;
      a.q = {c.heads, c.tq * width, c.d, width}, a.k = a.v = {a.kv_heads, c.tq * width, c.d, width};
      a.sums = attention_rows({c.batch, c.tq, c.heads, c.d}, true);
    }
    a.batch.rank = 2;
    a.batch.dims[0] = c.batch, a.batch.dims[1] = c.heads;
    a.batch.strides[1][0] = c.heads, a.batch.strides[1][1] = 1;  // K's batch index (before the groups)
    if (c.shift) {  // a slice of the mask and the bias a batch
      a.batch.strides[0][0] = 1;
      a.slices.rank = 1, a.slices.dims[0] = c.batch;
      a.slices.strides[0][0] = a.slices.strides[1][0] = c.tq * c.tk;
    }
    a.scale = scale;
    a.cond = cond, a.fill = fill, a.cond_row = c.tk, a.cond_col = 1;
    if (c.bias) a.bias = bias, a.bias_row = c.tk, a.bias_col = 1;
    a.zero_masked_rows = c.zero_masked_rows;
    if (c.dropout > 0) {
      a.dropout = true;
      a.threshold = dropout_threshold(c.dropout);
      a.keep_scale = float(1.0 / (1.0 - c.dropout));
      a.seed = 1234;
    }
    if (!c.scan_pairs) {
      space_kv_pairs(a);
      EXPECT_EQ(a.kv_pairs, c.groups);  // (a run of a pair for each grouped head)
    }
    return a;
  }

  void check() const {
    const T scale = from(0.3), fill = from(c.fill);
    // Q, K and V in arrays of their own, or (packed) in q, each from its offset
    const int64_t k_off = c.packed ? c.heads * c.d : 0, v_off = c.packed ? k_off + kv_count() / c.batch * c.d : 0;
    std::vector<T> q = random(c.packed ? c.batch * c.tq * (v_off + v_off - k_off) : pairs() * c.tq * c.d, 1);
    std::vector<T> k = random(c.packed ? 0 : kv_count() * c.tk * c.d, 2);
    std::vector<T> v = random(c.packed ? 0 : kv_count() * c.tk * c.dv, 3);
    std::vector<T> dy = random(pairs() * c.tq * c.dv, 4);
    const T *kp = (c.packed ? q.data() : k.data()) + k_off, *vp = (c.packed ? q.data() : v.data()) + v_off;
    const int64_t n = slices() * c.tq * c.tk;
    std::vector<T> bias = c.zero_below ? std::vector<T>(size_t(n), from(0.)) : random(n, 5);
    std::unique_ptr<bool[]> cond(new bool[size_t(n)]);
    for (int64_t b = 0; b < slices(); ++b)
      for (int64_t r = 0; r < c.tq; ++r)
        for (int64_t j = 0; j < c.tk; ++j) {
          const bool upper = j >= past_diagonal(b, r);
          if (c.causal_bias && upper) bias[at(b * c.heads, r, j)] = from(-INFINITY);
          cond[at(b * c.heads, r, j)] = (c.causal && upper) || r == c.masked_row;
        }
    Attention a = describe(&scale, cond.get(), &fill, bias.data());
    std::vector<uint8_t> kinds(size_t(size_kinds(a)), 0xff);  // (not a kind: a tile left unmapped shows)
    place_map(a, kinds.data());
    *a.mixed = 0;  // (as the launch)

    std::vector<T> y(size_t(pairs() * c.tq * c.dv)), dq(q.size()), dk(k.size()), dv(v.size());
    T *dkp = (c.packed ? dq.data() : dk.data()) + k_off, *dvp = (c.packed ? dq.data() : dv.data()) + v_off;
    std::vector<float> lse(size_t(pairs() * c.tq)), dots(lse.size());
    const unsigned row_blocks = unsigned((pairs() * c.tq + 3) / 4);
    std::vector<float> sums(size_t(pairs() * c.tq * c.d), 0.f);  // (dQ's, zeroed as the launch does, cast after)
    testing::emulate(unsigned(tc::tile_kinds_blocks(a)), tc::kBlock, [&] { tc::tile_kinds<T>(a); });
    auto backward = [&](auto&& grad) {
      testing::emulate(row_blocks, tc::kBlock, [&] { tc::row_dots<T>(a, dy.data(), y.data(), dots.data()); });
      grad();
      for (int64_t pair = 0; pair < pairs(); ++pair)
        for (int64_t r = 0; r < c.tq; ++r)
          for (int64_t e = 0; e < c.d; ++e)
            dq[size_t(a.q.at(pair, r) + e)] = from_float<T>(sums[size_t(a.sums.at(pair, r) + e)]);
    };
    if (c.warp_rows) {  // (dQ written by its kernel, D beside it)
      const unsigned rows = unsigned((pairs() * c.tq + tc::kRowWarps - 1) / tc::kRowWarps);
      const unsigned keys = unsigned((kv_count() * c.tk + tc::kRowWarps - 1) / tc::kRowWarps);
      testing::emulate(rows, kThreads, [&] { tc::rows_forward(a, q.data(), kp, vp, y.data(), lse.data()); });
      testing::emulate(rows, kThreads, [&] {
        tc::rows_dq(a, dy.data(), q.data(), kp, vp, y.data(), lse.data(), dots.data(), dq.data());
      });
      testing::emulate(keys, kThreads, [&] {
        tc::rows_dkv(a, dy.data(), q.data(), kp, vp, lse.data(), dots.data(), dkp, dvp);
      });
    } else if constexpr (std::is_same_v<T, float>) {  // (attention_f32.cuh's kernels)
      const unsigned q_blocks = unsigned((c.tq + tc::kTile - 1) / tc::kTile * pairs());
      const unsigned k_blocks = unsigned((c.tk + tc::kF32Keys - 1) / tc::kF32Keys * kv_count());
      testing::emulate(q_blocks, tc::kBlock, [&] { tc::forward_f32(a, q.data(), kp, vp, y.data(), lse.data()); });
      backward([&] {
        testing::emulate(k_blocks, tc::kBlock, [&] {
          tc::grad_f32(a, dy.data(), q.data(), kp, vp, lse.data(), dots.data(), sums.data(), dkp, dvp);
        });
      });
    } else {
      const unsigned q_blocks = unsigned((c.tq + tc::kTile - 1) / tc::kTile * pairs());
      const unsigned k_blocks = unsigned((c.tk + tc::kTile - 1) / tc::kTile * kv_count());
      auto run = [&]<int D>() {
        // (each build the launch runs, a block of the one that does not apply returning at once)
        tc::with_builds(a, c.general, [&]<bool kLean>(const Attention& b) {
          testing::emulate(q_blocks, tc::kBlock,
                           [&] { tc::forward<T, D, kLean>(b, q.data(), kp, vp, y.data(), lse.data()); });
        });
        backward([&] {
          tc::with_builds(a, c.general, [&]<bool kLean>(const Attention& b) {
            testing::emulate(k_blocks, tc::kBlock, [&] {
              tc::grad<T, D, kLean>(b, dy.data(), q.data(), kp, vp, lse.data(), dots.data(), sums.data(), dkp, dvp);
            });
          });
        });
      };
      if (std::max(c.d, c.dv) <= 64)
        run.template operator()<64>();
      else
        run.template operator()<128>();
    }
    // The map's word: set exactly where a tile is mixed.
    const auto mixed_tiles = std::count(kinds.begin(), kinds.begin() + kinds_count(a), uint8_t(tc::TileKind::kMixed));
    EXPECT_EQ(*a.mixed != 0, mixed_tiles > 0);
    if (c.mixed >= 0) {
      EXPECT_EQ(*a.mixed, uint32_t(c.mixed));
    }

    // The reference, in float64.
    std::vector<double> ry(y.size()), rlse(lse.size()), rdq(dq.size()), rdk(k.size()), rdv(v.size());
    double *rdkp = (c.packed ? rdq.data() : rdk.data()) + k_off, *rdvp = (c.packed ? rdq.data() : rdv.data()) + v_off;
    const double sc = value(scale);
    for (int64_t pair = 0; pair < pairs(); ++pair) {
      const int64_t kv = pair / c.heads * (c.heads / c.groups) + pair % c.heads / c.groups;
      auto kat = [&](int64_t j, int64_t e) { return size_t(a.k.at(kv, j) + e); };  // element e of key j
      auto vat = [&](int64_t j, int64_t e) { return size_t(a.v.at(kv, j) + e); };
      for (int64_t r = 0; r < c.tq; ++r) {
        const int64_t row = pair * c.tq + r;
        auto qat = [&](int64_t e) { return size_t(a.q.at(pair, r) + e); };  // element e of the row's Q, Y
        auto yat = [&](int64_t e) { return size_t(a.y.at(pair, r) + e); };
        std::vector<double> s(size_t(c.tk)), p(size_t(c.tk)), keep(size_t(c.tk), 1.0), dp(size_t(c.tk));
        double top = -INFINITY, l = 0;
        for (int64_t j = 0; j < c.tk; ++j) {
          double x = 0;
          for (int64_t e = 0; e < c.d; ++e) x += value(q[qat(e)]) * value(kp[kat(j, e)]);
          x = x * sc + (c.bias ? value(bias[at(pair, r, j)]) : 0.);
          s[size_t(j)] = cond[at(pair, r, j)] ? value(fill) : x;
          top = std::max(top, s[size_t(j)]);
          if (a.dropout && !dropout_keeps(a.seed, uint64_t(row * c.tk + j), a.threshold)) keep[size_t(j)] = 0;
          keep[size_t(j)] *= a.keep_scale;
        }
        for (int64_t j = 0; j < c.tk; ++j) l += p[size_t(j)] = top == -INFINITY ? 0. : std::exp(s[size_t(j)] - top);
        const bool empty = l == 0;
        rlse[size_t(row)] = empty ? INFINITY : top + std::log(l);
        double dsum = 0;
        auto dye = [&](int64_t e) { return value(dy[yat(e)]); };
        for (int64_t j = 0; j < c.tk; ++j) {
          p[size_t(j)] = empty ? 0. : p[size_t(j)] / l;
          double g = 0;
          for (int64_t e = 0; e < c.dv; ++e) {
            const double ve = value(vp[vat(j, e)]);
            ry[yat(e)] += p[size_t(j)] * keep[size_t(j)] * ve;
            g += dye(e) * ve;
            rdvp[vat(j, e)] += p[size_t(j)] * keep[size_t(j)] * dye(e);
          }
          dp[size_t(j)] = g * keep[size_t(j)];
          dsum += p[size_t(j)] * dp[size_t(j)];
        }
        for (int64_t j = 0; j < c.tk; ++j) {
          if (cond[at(pair, r, j)]) continue;
          const double ds = p[size_t(j)] * (dp[size_t(j)] - dsum) * sc;
          for (int64_t e = 0; e < c.d; ++e) {
            rdq[qat(e)] += ds * value(kp[kat(j, e)]);
            rdkp[kat(j, e)] += ds * value(q[qat(e)]);
          }
        }
      }
    }
    const double tol = std::is_same_v<T, float> ? 1e-5 : std::is_same_v<T, __half> ? 4e-3 : 3e-2;
    auto near = [&](const char* what, const auto& got, const std::vector<double>& want) {
      double scale_of = 0, worst = 0;
      for (double w : want)
        if (std::isfinite(w)) scale_of = std::max(scale_of, std::abs(w));
      for (size_t i = 0; i < want.size(); ++i) {
        const double g = double(got[i]);
        if (std::isinf(want[i])) {
          EXPECT_EQ(g, want[i]) << what << " at " << i;
          continue;
        }
        worst = std::max(worst, std::abs(g - want[i]));
      }
      EXPECT_LE(worst, tol * scale_of) << what << ": the largest error against a largest value of " << scale_of;
    };
    auto values = [](const std::vector<T>& x) {
      std::vector<double> out;
      for (T e : x) out.push_back(value(e));
      return out;
    };
    near("Y", values(y), ry);
    near("LSE", lse, rlse);
    near(c.packed ? "dX" : "dQ", values(dq), rdq);
    if (!c.packed) {
      near("dK", values(dk), rdk);
      near("dV", values(dv), rdv);
    }
  }
};

}  // namespace
}  // namespace onnxtrain::kernels::cuda
