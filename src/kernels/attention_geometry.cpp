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

}  // namespace

AttentionGeometry attention_geometry(const KernelCtx& c, size_t q, size_t kt, size_t v, size_t cond, size_t bias) {
  const std::vector<int64_t>&qd = c.in(q).dims(), &kd = c.in(kt).dims(), &vd = c.in(v).dims();
  if (qd.size() < 2 || kd.size() < 2 || vd.size() < 2)
    c.fail("Q, Kt and V must have rank >= 2, got " + dims_str(qd) + ", " + dims_str(kd) + " and " + dims_str(vd));
  AttentionGeometry g;
  g.batch.assign(qd.begin(), qd.end() - 2);
  g.tq = qd[qd.size() - 2];
  g.d = qd.back();
  g.tk = kd.back();
  g.dv = vd.back();
  if (kd[kd.size() - 2] != g.d || vd[vd.size() - 2] != g.tk)
    c.fail("Q " + dims_str(qd) + ", Kt " + dims_str(kd) + " and V " + dims_str(vd) + " do not chain");
  std::vector<int64_t> kb(kd.begin(), kd.end() - 2), vb(vd.begin(), vd.end() - 2), bd;
  g.groups = c.node.attr_int("kv_groups", 1);
  if (g.groups < 1 || (g.groups > 1 && (kb.empty() || kb.size() != g.batch.size())))
    c.fail("kv_groups " + std::to_string(g.groups) + " does not fit Kt " + dims_str(kd) + " and Q " + dims_str(qd));
  g.kv_count = numel_of(kb);
  std::vector<int64_t> repeated = kb;
  if (g.groups > 1) g.kv_heads = kb.back(), repeated.back() *= g.groups;
  if (kb != vb || !broadcast_dims(g.batch, repeated, &bd) || bd != g.batch)
    c.fail("Kt " + dims_str(kd) + " and V " + dims_str(vd) + " must share batch dims that broadcast to Q's " +
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
