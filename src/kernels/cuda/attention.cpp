// The CUDA kernels of com.onnxtrain.FlashAttention and FlashAttentionGrad (ops/flash_attention.cpp) on attention.cu's
// launchers: the geometry checked as on the CPU (kernels/attention_geometry.h); scale and fill stay on the device,
// the dropout ratio and training mode are read on the host (the op's host inputs). The scratch holds the tiled
// kernels' map of the tiles a mask or a bias changes (Attention::kinds), and the backward's rows' D (and dQ's sums)
// before it.
#include <algorithm>
#include <vector>

#include "kernels/attention_geometry.h"
#include "kernels/counter_random.h"
#include "kernels/cuda/indexing.h"

namespace onnxtrain::kernels::cuda {
namespace {

// The launch's description: operands from Q at input q, the scalars from input `scale` on (scale, cond, fill,
// ratio, training_mode, bias), as both ops order them.
Attention describe(const KernelCtx& c, size_t q, size_t scale) {
  const size_t cond = scale + 1, fill = scale + 2, ratio = scale + 3, training = scale + 4, bias = scale + 5;
  const AttentionGeometry g = attention_geometry(c, q, q + 1, q + 2, cond, bias);
  const DType t = c.in(q).dtype();
  for (size_t i : {q + 1, q + 2, scale, fill, bias})
    if (c.has(i) && c.in(i).dtype() != t)
      c.fail("input " + std::to_string(i) + " of dtype " + dtype_name(c.in(i).dtype()) + ", not Q's " +
             dtype_name(t));
  for (size_t i : {scale, fill})
    if (c.has(i) && c.in(i).numel() != 1) c.fail("input " + std::to_string(i) + " must be a scalar");
  if (std::max({g.q.row, g.k.row, g.v.row, g.y.row}) > 0x7fffffff / 256)  // (the kernels' 32-bit row offsets)
    throw UnsupportedError(c.node.where() + ": the CUDA kernel takes rows under 2^23 elements apart");
  if (g.d > kMaxHead || g.dv > kMaxHead)
    throw UnsupportedError(c.node.where() + ": the CUDA kernel takes heads of at most " + std::to_string(kMaxHead) +
                           " elements, not " + std::to_string(std::max(g.d, g.dv)));
  Attention a;
  a.pairs = g.pairs, a.tq = g.tq, a.tk = g.tk, a.d = g.d, a.dv = g.dv, a.kv_count = g.kv_count;
  a.q = g.q, a.k = g.k, a.v = g.v, a.y = g.y;
  a.packed = g.packed, a.k_offset = g.k_offset, a.v_offset = g.v_offset;
  // dQ's float32 sums: as dQ lies, but packed (then sequence-major rows of their own, cast into dX's after)
  a.sums = g.packed ? attention_rows({g.batch[0], g.tq, g.batch[1], g.d}, true) : g.q;
  a.kv_heads = g.kv_heads, a.groups = g.groups;
  const size_t r = g.batch.size();
  auto leading = [&](const std::vector<int64_t>& st) {  // a score stride vector's batch part (zeros without one)
    return st.empty() ? std::vector<int64_t>(r, 0) : std::vector<int64_t>(st.begin(), st.begin() + int64_t(r));
  };
  // The slices: the batch dims the mask or the bias varies over, numbered row-major.
  const std::vector<int64_t> cond_batch = leading(g.cond_strides), bias_batch = leading(g.bias_strides);
  std::vector<int64_t> slice(r, 0), dims, cond_strides, bias_strides;
  int64_t slices = 1;
  for (size_t d = r; d-- > 0;)
    if (cond_batch[d] != 0 || bias_batch[d] != 0) {
      slice[d] = slices, slices *= g.batch[d];
      dims.insert(dims.begin(), g.batch[d]);
      cond_strides.insert(cond_strides.begin(), cond_batch[d]);
      bias_strides.insert(bias_strides.begin(), bias_batch[d]);
    }
  a.batch = indexing(c, g.batch, {slice, g.kv_strides});
  a.slices = indexing(c, dims, {cond_strides, bias_strides});
  a.zero_masked_rows = c.node.attr_int("zero_masked_rows", 0) != 0;
  if (c.has(scale)) a.scale = c.in(scale).raw();
  if (c.has(cond) != c.has(fill)) c.fail("cond and fill come together");
  if (c.has(cond)) {
    a.cond = c.in(cond).data<bool>();
    a.fill = c.in(fill).raw();
    a.cond_row = g.cond_strides[r];
    a.cond_col = g.cond_strides[r + 1];
  }
  if (c.has(bias)) {
    a.bias = c.in(bias).raw();
    a.bias_row = g.bias_strides[r];
    a.bias_col = g.bias_strides[r + 1];
  }
  if (const double rate = attention_dropout_rate(c, ratio, training); rate > 0) {
    a.dropout = true;
    a.threshold = dropout_threshold(rate);
    a.keep_scale = float(1.0 / (1.0 - rate));
    a.seed = c.seed;
  }
  space_kv_pairs(a);
  return a;
}

void check_lse(const KernelCtx& c, const Tensor& lse, const Attention& a) {
  if (lse.dtype() != DType::kFloat32)
    throw UnsupportedError(c.node.where() + ": the CUDA kernel takes float32 operands' LSE in float32, not " +
                           dtype_name(lse.dtype()));
  if (lse.numel() != a.pairs * a.tq) c.fail("LSE " + dims_str(lse.dims()) + " must hold a value per row");
}

// What the scratch's sizes read of a node's operands, Q at input q: its pairs (Q's batch), query rows and keys, and
// head sizes (0 where known only at run time), as the node lays its operands out (sequence_major, packed_heads).
struct Sizes {
  Dim pairs, tq, tk;
  int64_t d = 0, dv = 0;
};
Sizes sizes_of(ops::InferCtx& s, size_t q) {
  const Shape& qs = s.shape(q);
  auto known = [](const Dim& x) { return x.is_const() ? x.value() : 0; };
  if (const int64_t heads = s.node().attr_int("packed_heads", 0); heads > 0) {
    if (qs.size() != 3) return {Dim(0), Dim(0), Dim(0)};  // (shape inference refuses such a node)
    const int64_t all = heads + 2 * heads / std::max<int64_t>(1, s.node().attr_int("kv_groups", 1));
    const int64_t d = known(qs[2]) / all;
    return {qs[0] * Dim(heads), qs[1], qs[1], d, d};
  }
  const Shape &ks = s.shape(q + 1), &vs = s.shape(q + 2);
  if (qs.size() < 2 || ks.size() < 2) return {Dim(0), Dim(0), Dim(0)};  // (shape inference refuses such a node)
  const std::vector<int64_t> f = s.node().attr_ints("sequence_major", {0, 0, 0, 0});
  const bool q_major = f.size() == 4 && f[0] && qs.size() == 4, k_major = f.size() == 4 && f[1] && ks.size() == 4;
  const size_t tq = q_major ? 1 : qs.size() - 2, tk = k_major ? 1 : ks.size() - 2;
  Shape batch;  // Q's dims but its sequence and head size
  for (size_t i = 0; i + 1 < qs.size(); ++i)
    if (i != tq) batch.push_back(qs[i]);
  return {shape_numel(batch), qs[tq], ks[tk], known(qs.back()), vs.empty() ? 0 : known(vs.back())};
}

// A byte per 16 rows by 16 keys of every pair's scores (Attention::kinds; a row's padded to a multiple of 4) and a
// word after them (Attention::mixed), for operands the tiled kernels take with a mask or a bias (mapped); q, cond,
// bias: the inputs of Q, the mask and the bias.
Dim kinds_bytes(ops::InferCtx& s, size_t q, size_t cond, size_t bias) {
  if (!mapped(s.dtype(q), s.has(cond) || s.has(bias)) || s.shape(q).size() < 2) return Dim(0);
  const Sizes z = sizes_of(s, q);
  return z.pairs * Dim::ceil_div(z.tq, Dim(kKindRows)) * Dim::ceil_div(Dim::ceil_div(z.tk, Dim(kKindKeys)), Dim(4)) *
             Dim(4) +
         Dim(kMixedBytes);
}

// a's map in the scratch after `at` bytes of other scratch, where kinds_bytes declared it.
void map_in(const KernelCtx& c, size_t at, Attention& a, DType t) {
  if (mapped(t, a.cond || a.bias)) place_map(a, c.scratch_as<uint8_t>(at, size_t(size_kinds(a))));
}

// Element n of tensor t's data, where its raw pointer starts.
void* element(const Tensor& t, int64_t n) { return static_cast<char*>(t.raw()) + n * int64_t(dtype_size(t.dtype())); }

void flash_attention(KernelCtx& c) {
  Attention a = describe(c, 0, 3);
  map_in(c, 0, a, c.in(0).dtype());
  if (c.wants(1)) check_lse(c, c.out(1), a);
  const Tensor& x = c.in(0);  // (packed: K and V in it too)
  cuda::flash_attention(x.dtype(), a, x.raw(), a.packed ? element(x, a.k_offset) : c.in(1).raw(),
                        a.packed ? element(x, a.v_offset) : c.in(2).raw(), c.out(0).raw(),
                        c.wants(1) ? c.out(1).data<float>() : nullptr, stream());
}

void flash_attention_grad(KernelCtx& c) {
  Attention a = describe(c, 1, 6);
  ScratchCarver scratch{c};
  float* row_dots = scratch.take<float>(a.pairs * a.tq);
  float* dq_sums =
      summed_dq(c.in(1).dtype(), a.d, a.dv, a.packed) ? scratch.take<float>(a.pairs * a.tq * a.d) : nullptr;
  map_in(c, scratch.at, a, c.in(1).dtype());
  if (c.in(0).dims() != c.in(4).dims() || c.in(4).numel() != a.pairs * a.tq * a.dv ||
      c.in(0).dtype() != c.in(1).dtype())
    c.fail("dY " + dims_str(c.in(0).dims()) + " and Y " + dims_str(c.in(4).dims()) + " must be the output's shape");
  check_lse(c, c.in(5), a);
  const Tensor& x = c.in(1);
  Tensor& dx = c.out(0);  // (packed: dX, dK and dV in it too)
  cuda::flash_attention_grad(x.dtype(), a, c.in(0).raw(), x.raw(), a.packed ? element(x, a.k_offset) : c.in(2).raw(),
                             a.packed ? element(x, a.v_offset) : c.in(3).raw(), c.in(4).raw(),
                             c.in(5).data<float>(), row_dots, dq_sums, dx.raw(),
                             a.packed ? element(dx, a.k_offset) : c.out(1).raw(),
                             a.packed ? element(dx, a.v_offset) : c.out(2).raw(), stream());
}

Dim forward_scratch(const ops::Op&, ops::InferCtx& s) { return kinds_bytes(s, 0, 4, 8); }
// FlashAttentionGrad's: a float per query row (input 5, the LSE, holds one), a float per element of Q where the
// tiled kernels sum dQ in scratch (summed_dq; a head size known only at run time counts as one they take), then the
// map.
Dim backward_scratch(const ops::Op&, ops::InferCtx& s) {
  const Sizes z = sizes_of(s, 1);
  const bool packed = s.node().attr_int("packed_heads", 0) > 0;  // (else dQ's sums a float an element of Q)
  Dim r = shape_numel(s.shape(5)) * Dim(4);
  if (summed_dq(s.dtype(1), z.d, z.dv, packed))
    r = scratch_span(r) + (packed ? z.pairs * z.tq * Dim(z.d) : shape_numel(s.shape(1))) * Dim(4);
  const Dim kinds = kinds_bytes(s, 1, 7, 11);
  return kinds.is_const() && kinds.value() == 0 ? r : scratch_span(r) + kinds;
}

}  // namespace

// The K and V batch index pair p reads: the kernels' slice_and_kv (attention_common.cuh), on the host.
static int64_t kv_of(const Attention& a, int64_t p) {
  int64_t kv = 0;
  for (int d = a.batch.rank - 1; d >= 0; --d) {
    kv += (d > 0 ? p % a.batch.dims[d] : p) * a.batch.strides[1][d];
    if (d > 0) p /= a.batch.dims[d];
  }
  const int64_t span = a.kv_heads * a.groups;
  return a.groups == 1 ? kv : kv / span * a.kv_heads + kv % span / a.groups;
}

void space_kv_pairs(Attention& a) {
  a.kv_pairs = a.kv_pair_mult = a.kv_pair_step = 0;
  if (a.kv_count <= 0 || a.pairs <= 0 || a.pairs % a.kv_count != 0) return;
  const int64_t per = a.pairs / a.kv_count;
  std::vector<int64_t> pairs(size_t(a.pairs)), seen(size_t(a.kv_count), 0);  // pairs: kv's n-th at kv * per + n
  for (int64_t p = 0; p < a.pairs; ++p) {
    const int64_t kv = kv_of(a, p);
    if (kv < 0 || kv >= a.kv_count || seen[size_t(kv)] == per) return;
    pairs[size_t(kv * per + seen[size_t(kv)]++)] = p;
  }
  const int64_t mult = a.kv_count > 1 ? pairs[size_t(per)] : 0, step = per > 1 ? pairs[1] - pairs[0] : 0;
  for (int64_t kv = 0; kv < a.kv_count; ++kv)
    for (int64_t n = 0; n < per; ++n)
      if (pairs[size_t(kv * per + n)] != kv * mult + n * step) return;
  a.kv_pairs = per, a.kv_pair_mult = mult, a.kv_pair_step = step;
}

namespace {

const bool kRegistered = register_kernels(
    cuda_device(0), {{"com.onnxtrain", "FlashAttention", kernel(flash_attention), forward_scratch},
                     {"com.onnxtrain", "FlashAttentionGrad", kernel(flash_attention_grad), backward_scratch}});

}  // namespace
}  // namespace onnxtrain::kernels::cuda
