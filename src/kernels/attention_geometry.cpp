#include "kernels/attention_geometry.h"

#include <string>

#include "kernels/strides.h"


namespace onnxtrain::kernels {

int64_t AttentionGeometry::offset(const std::vector<int64_t>& strides, int64_t pair) const {
  return broadcast_offsets<1>(pair, batch, {&strides})[0];
}

int64_t AttentionGeometry::kv_of(int64_t pair) const {
  const int64_t repeated = offset(kv_strides, pair);  // index over K's batch dims with its heads repeated
  if (groups == 1) return repeated;
  return repeated / (kv_heads * groups) * kv_heads + repeated % (kv_heads * groups) / groups;
}

namespace {

// Strides of input i (broadcast to the scores) over (batch..., tq, tk).
std::vector<int64_t> score_strides(const KernelCtx& c, const AttentionGeometry& g, size_t i, const char* what) {
  std::vector<int64_t> scores = g.batch, bd;
  scores.insert(scores.end(), {g.tq, g.tk});
  if (!broadcast_dims(scores, c.in(i).dims(), &bd) || bd != scores)
    c.fail(std::string(what) + " " + dims_str(c.in(i).dims()) + " does not broadcast to the scores " +
           dims_str(scores));
  return broadcast_strides(c.in(i).dims(), scores);
}

// The node's sequence_major flags (Q, K, V, Y).
std::vector<int64_t> sequence_major(const KernelCtx& c) {
  std::vector<int64_t> f = c.node.attr_ints("sequence_major", {0, 0, 0, 0});
  if (f.size() != 4) c.fail("sequence_major must hold 4 flags (Q, K, V, Y)");
  return f;
}

// Input i's dims as the attention reads them: (B, T, H, d) as (B, H, T, d) where sequence-major.
std::vector<int64_t> heads_first(const KernelCtx& c, size_t i, int64_t flag, const char* what) {
  std::vector<int64_t> d = c.in(i).dims();
  if (!flag) return d;
  if (d.size() != 4) c.fail(std::string(what) + " " + dims_str(d) + " must have rank 4 (B, T, H, d)");
  std::swap(d[1], d[2]);
  return d;
}

// Q's, K's and V's logical dims and rows where packed_heads=H takes them from X (B, T, (H + 2 Hkv) d), input q.
struct Packed {
  std::vector<int64_t> q, k, v;
  AttentionRows rows_q, rows_kv;
  int64_t k_offset = 0, v_offset = 0;
};
Packed packed(const KernelCtx& c, size_t q, int64_t heads) {
  const std::vector<int64_t>& x = c.in(q).dims();
  const int64_t groups = c.node.attr_int("kv_groups", 1);
  if (groups < 1 || heads % groups != 0) c.fail("packed_heads needs heads a multiple of kv_groups");
  const int64_t kv = heads / groups, all = heads + 2 * kv;
  if (x.size() != 3 || x[2] % all != 0)
    c.fail("packed X " + dims_str(x) + " must be (B, T, " + std::to_string(all) + " d)");
  const int64_t d = x[2] / all, outer = x[1] * x[2];
  return {{x[0], heads, x[1], d}, {x[0], kv, x[1], d}, {x[0], kv, x[1], d}, {heads, outer, d, x[2]},
          {kv, outer, d, x[2]}, heads * d, (heads + kv) * d};
}

}  // namespace

AttentionGeometry attention_geometry(const KernelCtx& c, size_t q, size_t k, size_t v, size_t cond, size_t bias) {
  const std::vector<int64_t> f = sequence_major(c);
  const int64_t heads = c.node.attr_int("packed_heads", 0);
  AttentionGeometry g;
  std::vector<int64_t> qd, kd, vd;
  if (heads > 0) {
    Packed p = packed(c, q, heads);
    qd = p.q, kd = p.k, vd = p.v;
    g.q = p.rows_q, g.k = g.v = p.rows_kv;
    g.packed = true, g.k_offset = p.k_offset, g.v_offset = p.v_offset;
  } else {
    qd = heads_first(c, q, f[0], "Q"), kd = heads_first(c, k, f[1], "K"), vd = heads_first(c, v, f[2], "V");
    g.q = attention_rows(c.in(q).dims(), f[0] != 0);
    g.k = attention_rows(c.in(k).dims(), f[1] != 0);
    g.v = attention_rows(c.in(v).dims(), f[2] != 0);
  }
  if (qd.size() < 2 || kd.size() < 2 || vd.size() < 2)
    c.fail("Q, K and V must have rank >= 2, got " + dims_str(qd) + ", " + dims_str(kd) + " and " + dims_str(vd));
  g.batch.assign(qd.begin(), qd.end() - 2);
  g.tq = qd[qd.size() - 2];
  g.d = qd.back();
  g.tk = kd[kd.size() - 2];
  g.dv = vd.back();
  if (kd.back() != g.d || vd[vd.size() - 2] != g.tk)
    c.fail("Q " + dims_str(qd) + ", K " + dims_str(kd) + " and V " + dims_str(vd) + " do not chain");
  if (f[3] && g.batch.size() != 2) c.fail("a sequence-major Y needs rank 4 operands");
  std::vector<int64_t> y = g.batch;
  y.insert(y.end(), {g.tq, g.dv});
  if (f[3]) std::swap(y[1], y[2]);
  g.y = attention_rows(y, f[3] != 0);
  std::vector<int64_t> kb(kd.begin(), kd.end() - 2), vb(vd.begin(), vd.end() - 2), bd;
  g.groups = c.node.attr_int("kv_groups", 1);
  if (g.groups < 1 || (g.groups > 1 && (kb.empty() || kb.size() != g.batch.size())))
    c.fail("kv_groups " + std::to_string(g.groups) + " does not fit K " + dims_str(kd) + " and Q " + dims_str(qd));
  g.kv_count = numel_of(kb);
  std::vector<int64_t> repeated = kb;
  if (g.groups > 1) g.kv_heads = kb.back(), repeated.back() *= g.groups;
  if (kb != vb || !broadcast_dims(g.batch, repeated, &bd) || bd != g.batch)
    c.fail("K " + dims_str(kd) + " and V " + dims_str(vd) + " must share batch dims that broadcast to Q's " +
           dims_str(qd) + (g.groups > 1 ? " (their heads repeated " + std::to_string(g.groups) + " times)" : ""));
  g.kv_strides = broadcast_strides(repeated, g.batch);
  g.pairs = numel_of(g.batch);
  if (c.has(cond)) g.cond_strides = score_strides(c, g, cond, "cond");
  if (c.has(bias)) g.bias_strides = score_strides(c, g, bias, "bias");
  return g;
}

double attention_dropout_rate(const KernelCtx& c, size_t ratio, size_t training) {
  if (!c.has(ratio) || !c.has(training) || c.in(training).to_int64().at(0) == 0) return 0;
  const double rate = c.in(ratio).to_double().at(0);
  if (rate < 0 || rate >= 1) c.fail("ratio " + std::to_string(rate) + " must be in [0, 1)");
  return rate;
}

}  // namespace onnxtrain::kernels
