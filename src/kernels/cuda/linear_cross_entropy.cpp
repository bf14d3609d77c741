// The CUDA kernels of the fused head (ops/linear_cross_entropy.cpp): com.onnxtrain.LinearCrossEntropy, its gradient
// LinearCrossEntropyGrad and LinearGradAdd, on matmul.cu's GEMM and cross_entropy.cu's row kernels. Both go by blocks
// of rows whose scores (in X's dtype: a 16-bit head's rounded to it as autocast's Linear writes them, as on the CPU)
// fill at most kBlockBytes of scratch: each block's scores, its rows' log-sum-exps and losses, then (for gradients)
// its scores' gradient in their place, dX's rows, and its share of dW and dB, summed over the blocks (dW of 16-bit
// operands in float32, rounded once; dB in its dtype). The targets
// stay on the device (one out of range gives a NaN loss, not an error). Classes that are not a multiple of 8 (GPT-2's
// 50,257) are padded to one (padded(), pad_weights()), so that cuBLASLt's fast kernels take the products.
#include "kernels/cuda/indexing.h"
#include "kernels/cuda/product.h"
#include "kernels/cuda/workspace.h"
#include "ops/loss.h"

namespace onnxtrain::kernels::cuda {
namespace {

using ops::LinearGradAddAttrs;
using ops::LossAttrs;

constexpr int64_t kBlockBytes = int64_t(256) << 20, kPad = 8;

// The head's sizes: X (n, k) as rows, W (c, k), B (c)?, n targets; checked. ld: the elements a row of the scores
// and of their gradient holds (c, or c padded).
struct Head {
  int64_t n = 0, k = 0, c = 0;
  DType t = DType::kFloat32;
  int64_t ld = 0;
};
Head head_of(const KernelCtx& ctx, size_t x, size_t w, size_t b, size_t target) {
  const Tensor &X = ctx.in(x), &W = ctx.in(w);
  Head h{0, X.dims().back(), W.rank() == 2 ? W.dims()[0] : -1, X.dtype()};
  h.n = h.k ? X.numel() / h.k : numel_of(std::vector<int64_t>(X.dims().begin(), X.dims().end() - 1));
  if (h.c < 0 || W.dims()[1] != h.k || (ctx.has(b) && ctx.in(b).numel() != h.c) ||
      (target != size_t(-1) && ctx.in(target).numel() != h.n))
    ctx.fail("X " + dims_str(X.dims()) + ", W " + dims_str(W.dims()) +
             (ctx.has(b) ? ", B " + dims_str(ctx.in(b).dims()) : "") + " and the targets do not fit together");
  for (size_t i : {w, b})
    if (ctx.has(i) && ctx.in(i).dtype() != h.t) ctx.fail("X, W and B must have one dtype");
  h.ld = h.c;
  return h;
}

// Whether the classes may be padded: float operands, no dB asked for (dB sums the gradient's columns c apart).
bool paddable(DType t, bool db) {
  return !db && (t == DType::kFloat32 || t == DType::kBFloat16 || t == DType::kFloat16);
}

// h with its classes padded to a multiple of kPad where they are not one and may be: cuBLASLt's fast kernels need
// the rows of the scores and of their gradient 16-byte aligned (GPT-2's 50,257 classes took Turing's kernels on an
// H100: 34 ms of a 259 ms step). The padding classes' weights (and bias) are 0 (pad_weights); the cross-entropy reads
// the c classes of each row alone, and writes their gradient and zeros for the padding, over which dX's product runs
// (its inner dim a multiple of 8 too) and dW's does not.
Head padded(Head h, bool db) {
  if (paddable(h.t, db) && h.c % kPad) h.ld = (h.c + kPad - 1) / kPad * kPad;
  return h;
}

// Rows per block for c classes of dtype t (the scratch function's Dim the same, at most the rows there are).
int64_t block_rows(int64_t c, DType t) {
  return std::max<int64_t>(1, kBlockBytes / std::max<int64_t>(1, c * int64_t(dtype_size(t))));
}

CrossEntropy cross_entropy_of(const LossAttrs& a, const KernelCtx& c, const Head& h, size_t target) {
  CrossEntropy e;
  e.n = h.n, e.c = h.c, e.ld = h.ld;
  e.target_type = c.in(target).dtype();
  e.target = c.in(target).raw();
  e.has_ignore = a.has_ignore, e.ignore = a.ignore_index;
  return e;
}

// Rows [r0, r0 + m) of e.
CrossEntropy rows_from(CrossEntropy e, int64_t r0, int64_t m) {
  e.target = static_cast<const char*>(e.target) + r0 * int64_t(dtype_size(e.target_type));
  e.n = m;
  return e;
}

// Row r0 of t seen as rows of `width` elements.
const char* row(const Tensor& t, int64_t r0, int64_t width) {
  return static_cast<const char*>(t.raw()) + r0 * width * int64_t(dtype_size(t.dtype()));
}
char* row(Tensor& t, int64_t r0, int64_t width) {
  return static_cast<char*>(t.raw()) + r0 * width * int64_t(dtype_size(t.dtype()));
}

// The workspace first in a head kernel's scratch, for products of a block of rows' scores at most (and of dW).
Dim head_workspace(const Dim& block, const Dim& classes, const Dim& k) {
  return scratch_span(workspace_scratch(Dim::max(block, k) * classes));
}
Workspace take_workspace(const KernelCtx& c, ScratchCarver& scratch, int64_t block, const Head& h) {
  const Dim bytes = head_workspace(Dim(block), Dim(h.ld), Dim(h.k));
  scratch.at = size_t(bytes.value());
  return workspace_in(c, 0, size_t(bytes.value()));
}

// W and B as the scores' product reads them: the inputs, or with the classes padded copies in scratch, the padding
// classes' weights and bias 0. (A bias of the padding's -inf would do without the cross-entropy's stride, but a 16-bit
// bias into float32 scores takes the tiled GEMM, not cuBLASLt: GPT-2's head, which has none, took 18 ms a product.)
struct Weights {
  const void* w;
  const void* b;
};
Weights pad_weights(const KernelCtx& c, ScratchCarver& scratch, const Head& h, size_t w, size_t b) {
  const void* bias = c.has(b) ? c.in(b).raw() : nullptr;
  if (h.ld == h.c) return {c.in(w).raw(), bias};
  const int64_t es = int64_t(dtype_size(h.t));
  char* wp = scratch.take<char>(h.ld * h.k * es);
  copy_bytes(c.in(w).raw(), wp, size_t(h.c * h.k * es));
  zero(wp + h.c * h.k * es, size_t((h.ld - h.c) * h.k * es));
  if (!bias) return {wp, nullptr};
  char* bp = scratch.take<char>(h.ld * es);
  copy_bytes(bias, bp, size_t(h.c * es));
  zero(bp + h.c * es, size_t((h.ld - h.c) * es));
  return {wp, bp};
}

// s (m, ld) of X's dtype = X's rows [r0, r0 + m) W^T + B.
void scores(const KernelCtx& c, const Head& h, size_t x, const Weights& wb, int64_t r0, int64_t m, void* s,
            Workspace ws) {
  product(h.t, h.t, row(c.in(x), r0, h.k), h.k, 1, wb.w, 1, h.k, m, h.ld, h.k, wb.b, 0, s, ws);
}

// dX = G W (its rows), dW = G^T X and dB = G's column sums, each into output first + 0, 1, 2 where asked for, a
// block of rows' G (rows ld apart) at a time: dW and dB summed over the blocks, dW of 16-bit operands in float32
// (`sum`: ld x k floats of scratch, each block's product added to it in place, over the padding classes too, whose G
// is zero: an odd count of classes had taken cutlass's sm_80 kernel on an H200, 470 us a block of GPT-2's rows where
// nvjet's took 300 for the scores) and its first c rows rounded once by finish().
struct Gradients {
  KernelCtx& c;
  const Head& h;
  size_t x, w, first;
  Workspace ws;
  float* sum = nullptr;

  static bool in_float32(const KernelCtx& c, const Head& h, size_t first) {
    return h.t != DType::kFloat32 && c.wants(first + 1);
  }
  Gradients(KernelCtx& ctx, const Head& head, size_t x_, size_t w_, size_t first_, ScratchCarver& scratch,
            Workspace workspace)
      : c(ctx), h(head), x(x_), w(w_), first(first_), ws(workspace) {
    if (in_float32(c, h, first)) sum = scratch.take<float>(h.ld * h.k);
  }
  void add(const void* g, const Weights& wb, int64_t r0, int64_t m) {
    if (c.wants(first))  // (over the padding too, its G and W zeros: cuBLASLt's kernels of aligned rows)
      product(h.t, h.t, g, h.ld, 1, wb.w, h.k, 1, m, h.k, h.ld, nullptr, 0, row(c.out(first), r0, h.k), ws);
    if (c.wants(first + 1)) {
      void* dw = sum ? static_cast<void*>(sum) : c.out(first + 1).raw();
      product(h.t, sum ? DType::kFloat32 : h.t, g, 1, h.ld, row(c.in(x), r0, h.k), h.k, 1, sum ? h.ld : h.c, h.k, m,
              r0 ? dw : nullptr, h.k, dw, ws);
    }
    if (c.wants(first + 2)) {  // (no padding: paddable())
      void* db = c.out(first + 2).raw();
      column_sums(h.t, g, m, h.c, r0 ? db : nullptr, db, stream());
    }
  }
  void finish() {
    for (size_t i : {first + 1, first + 2})  // (no rows: no block wrote them)
      if (h.n == 0 && c.wants(i)) zero(c.out(i).raw(), c.out(i).nbytes());
    if (sum && h.n > 0) cast(DType::kFloat32, h.t, sum, c.out(first + 1).raw(), h.c * h.k, stream());
  }
};

void check_float32(const KernelCtx& c, const Tensor& t, const char* what) {
  if (t.dtype() != DType::kFloat32)
    throw UnsupportedError(c.node.where() + ": the CUDA kernel takes " + what + " in float32, not " +
                           dtype_name(t.dtype()));
}

void linear_cross_entropy(const LossAttrs& a, KernelCtx& c) {
  const Head h = padded(head_of(c, 0, 1, 2, 3), c.wants(4));
  const bool grads = c.wants(2) || c.wants(3) || c.wants(4);
  if (grads && a.reduction == LossAttrs::kNone) c.fail("gradients in forward need a loss of one number");
  check_float32(c, c.out(0), "the loss");
  const CrossEntropy e = cross_entropy_of(a, c, h, 3);
  const bool mean = a.reduction == LossAttrs::kMean;
  const int64_t block = std::min(h.n, block_rows(h.ld, h.t)), es = int64_t(dtype_size(h.t));
  ScratchCarver scratch{c};
  const Workspace ws = take_workspace(c, scratch, block, h);
  void* s = scratch.take<uint8_t>(block * h.ld * es);
  float* lse = c.wants(1) ? c.out(1).data<float>() : scratch.take<float>(h.n);
  double* totals = scratch.take<double>(4);  // the loss's sum and count; the count alone, for the gradient's scale
  zero(totals, 4 * sizeof(double));
  Gradients gradients(c, h, 0, 1, 2, scratch, ws);
  const Weights wb = pad_weights(c, scratch, h, 1, 2);
  if (grads && mean) count_targets(e, totals + 2, stream());
  float* loss = c.out(0).data<float>();
  for (int64_t r0 = 0; r0 < h.n; r0 += block) {
    const int64_t m = std::min(block, h.n - r0);
    const CrossEntropy rows = rows_from(e, r0, m);
    scores(c, h, 0, wb, r0, m, s, ws);
    cross_entropy_rows(rows, h.t, s, lse + r0, a.reduction == LossAttrs::kNone ? loss + r0 : nullptr, totals, h.t,
                       c.wants(5) ? row(c.out(5), r0, h.c) : nullptr, stream());  // (output 5: the logits)
    if (!grads) continue;
    cross_entropy_grad(rows, h.t, s, h.t, lse + r0, nullptr, false, mean, totals + 2, s, stream());
    gradients.add(s, wb, r0, m);
  }
  if (a.reduction != LossAttrs::kNone) cross_entropy_total(mean, totals, loss, stream());
  gradients.finish();
}

void linear_cross_entropy_grad(const LossAttrs& a, KernelCtx& c) {
  const Head h = padded(head_of(c, 1, 2, 3, 4), c.wants(2));
  check_float32(c, c.in(0), "the loss's gradient");
  check_float32(c, c.in(5), "the log-sum-exps");
  const bool per_row = a.reduction == LossAttrs::kNone;
  if (c.in(0).numel() != (per_row ? h.n : 1) || c.in(5).numel() != h.n)
    c.fail("dloss " + dims_str(c.in(0).dims()) + " or lse " + dims_str(c.in(5).dims()) + " does not fit the rows");
  const CrossEntropy e = cross_entropy_of(a, c, h, 4);
  const int64_t block = std::min(h.n, block_rows(h.ld, h.t));
  ScratchCarver scratch{c};
  const Workspace ws = take_workspace(c, scratch, block, h);
  void* s = scratch.take<uint8_t>(block * h.ld * int64_t(dtype_size(h.t)));
  double* totals = scratch.take<double>(2);
  Gradients gradients(c, h, 1, 2, 0, scratch, ws);
  const Weights wb = pad_weights(c, scratch, h, 2, 3);
  zero(totals, 2 * sizeof(double));
  if (a.reduction == LossAttrs::kMean) count_targets(e, totals, stream());
  const float *lse = c.in(5).data<float>(), *dloss = c.in(0).data<float>();
  for (int64_t r0 = 0; r0 < h.n; r0 += block) {
    const int64_t m = std::min(block, h.n - r0);
    scores(c, h, 1, wb, r0, m, s, ws);
    cross_entropy_grad(rows_from(e, r0, m), h.t, s, h.t, lse + r0, dloss + (per_row ? r0 : 0), per_row,
                       a.reduction == LossAttrs::kMean, totals, s, stream());
    gradients.add(s, wb, r0, m);
  }
  gradients.finish();
}

void linear_grad_add(const LinearGradAddAttrs& a, KernelCtx& c) {
  const Head h = head_of(c, 1, 2, size_t(-1), size_t(-1));
  Tensor& out = c.out(0);
  if ((c.has(0) && (c.in(0).numel() != h.n * h.c || c.in(0).dtype() != h.t)) ||
      (c.has(3) && (c.in(3).numel() != out.numel() || c.in(3).dtype() != out.dtype())))
    c.fail("dY " + (c.has(0) ? dims_str(c.in(0).dims()) : std::string("(unset)")) + " or the base does not fit X " +
           dims_str(c.in(1).dims()) + " and W " + dims_str(c.in(2).dims()));
  const void* base = c.has(3) ? c.in(3).raw() : nullptr;
  if (!c.has(0) || h.n == 0) return base ? copy(c.in(3), out) : zero(out.raw(), out.nbytes());  // the base, as it is
  const void* dy = c.in(0).raw();
  const Workspace ws = workspace_in(c, 0, c.scratch_bytes);
  if (a.wrt == LinearGradAddAttrs::kX)
    product(h.t, h.t, dy, h.c, 1, c.in(2).raw(), h.k, 1, h.n, h.k, h.c, base, h.k, out.raw(), ws);
  if (a.wrt == LinearGradAddAttrs::kW)
    product(h.t, h.t, dy, 1, h.c, c.in(1).raw(), h.k, 1, h.c, h.k, h.n, base, h.k, out.raw(), ws);
  if (a.wrt == LinearGradAddAttrs::kB) column_sums(h.t, dy, h.n, h.c, base, out.raw(), stream());
}

Dim span_of(const Dim& elements, int64_t bytes) { return scratch_span(elements * Dim(bytes)); }

// As the kernels carve it: cuBLASLt's workspace, a block's scores (X's dtype, their gradient taking their place), the
// totals, forward's log-sum-exps when output 1 is not asked for, and for dW of 16-bit operands its float32 sum; with
// the classes padded (all of it for a count of classes known only at run time), W's padded copy, and B's where there is
// a B; the float32 sum of dW over the padded classes.
Dim head_scratch(ops::InferCtx& s, size_t x, size_t w, bool grads, bool lse, bool dw, bool db,
                 int64_t totals) {  // (B is input w + 1)
  const Shape& xs = s.shape(x);
  const DType t = s.dtype(x);
  const int64_t es = int64_t(dtype_size(t));
  const Dim rows = shape_numel(Shape(xs.begin(), xs.end() - 1)), classes = s.shape(w)[0], k = s.shape(w)[1];
  const bool pad = paddable(t, db) && (!classes.is_const() || classes.value() % kPad != 0);
  const Dim width = pad ? Dim::ceil_div(classes, Dim(kPad)) * Dim(kPad) : classes;
  const Dim block = width.is_const() ? Dim::min(rows, Dim(block_rows(width.value(), t))) : rows;
  Dim r = head_workspace(block, width, k) + span_of(block * width, es);
  if (lse) r = r + span_of(rows, 4);
  r = r + span_of(Dim(totals), 8);
  if (grads && dw && t != DType::kFloat32) r = r + span_of(width * k, 4);
  if (pad) r = r + span_of(width * k, es);
  if (pad && s.has(w + 1)) r = r + span_of(width, es);
  return r;
}

Dim forward_scratch(const ops::Op&, ops::InferCtx& s) {
  const auto& outs = s.node().outputs;
  auto asked = [&](size_t i) { return i < outs.size() && outs[i] != nullptr; };
  return head_scratch(s, 0, 1, asked(2) || asked(3) || asked(4), !asked(1), asked(3), asked(4), 4);
}

Dim backward_scratch(const ops::Op&, ops::InferCtx& s) {
  const auto& outs = s.node().outputs;
  auto asked = [&](size_t i) { return i < outs.size() && outs[i] != nullptr; };
  return head_scratch(s, 1, 2, true, false, asked(1), asked(2), 2);
}

const bool kRegistered = register_kernels(
    cuda_device(0),
    {{"com.onnxtrain", "LinearCrossEntropy", kernel<LossAttrs>(linear_cross_entropy), forward_scratch},
     {"com.onnxtrain", "LinearCrossEntropyGrad", kernel<LossAttrs>(linear_cross_entropy_grad), backward_scratch},
     {"com.onnxtrain", "LinearGradAdd", kernel<LinearGradAddAttrs>(linear_grad_add), product_scratch}});

}  // namespace
}  // namespace onnxtrain::kernels::cuda
