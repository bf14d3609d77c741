// The CUDA kernels' launchers: plain pointers, sizes and small shape structs in, work queued on `stream` out.
// The .cu files define them (nvcc compiles nothing of the IR); the .cpp files beside them read nodes, check
// shapes and dtypes, and call them.
#pragma once
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

#include "kernels/attention_rows.h"
#include "kernels/parameter_math.h"
#include "onnxtrain/dtype.h"

namespace onnxtrain::kernels::cuda {

// A shape of up to kMaxRank dims, and where element (i0, i1, ...) of it sits in up to three arrays (element
// strides; 0 along a broadcast dim). Passed to kernels by value.
constexpr int kMaxRank = 8;
struct Indexing {
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t strides[3][kMaxRank] = {};
};

enum class Unary { kRelu, kNeg, kAbs, kExp, kLog, kSqrt, kReciprocal, kTanh, kSigmoid, kErf, kSin, kCos, kFloor, kCeil,
                   kGelu, kGeluTanh, kNot };
// kGeluGrad and kGeluTanhGrad: a (the output's gradient) times GELU's derivative at b.
// kMax and kMin keep a NaN of either operand, as the CPU's do.
enum class Binary { kAdd, kSub, kMul, kDiv, kPow, kGeluGrad, kGeluTanhGrad, kMax, kMin, kEqual, kLess, kLessOrEqual,
                    kGreater, kGreaterOrEqual, kAnd, kOr, kXor };

// y = op(x) over n elements of dtype t (float32, float16, bfloat16; Relu, Neg and Abs also int32, int64; Not bool).
void unary(Unary op, DType t, const void* x, void* y, int64_t n, cudaStream_t stream);
// out = op(a, b) at each index of `ix` (strides 0: a, 1: b); comparisons write bool.
void binary(Binary op, DType t, const void* a, const void* b, void* out, const Indexing& ix, cudaStream_t stream);
// out = cond ? a : b (strides 0: cond, 1: a, 2: b), elements of `elem_bytes`.
void where(int elem_bytes, const bool* cond, const void* a, const void* b, void* out, const Indexing& ix,
           cudaStream_t stream);
// y = x converted from dtype `from` to `to` (float32, float16, bfloat16, float64, int32, int64, int8, uint8, bool).
void cast(DType from, DType to, const void* x, void* y, int64_t n, cudaStream_t stream);
// dst[i] = the value of `elem_bytes` bytes at `value`, for n elements.
void fill(int elem_bytes, const void* value, void* dst, int64_t n, cudaStream_t stream);
// dst[i] = start + i * delta for n elements of dtype t (float32, float64, int32, int64); start and delta
// point to one value of t each, on the host (Range).
void range(DType t, const void* start, const void* delta, void* dst, int64_t n, cudaStream_t stream);
// Up to kMaxRank int64 values written to dst (Shape, Size): no host buffer, no copy.
void write_int64(const int64_t (&values)[kMaxRank], int n, int64_t* dst, cudaStream_t stream);
// Dropout's counter-based mask (kernels/counter_random.h): y = keep ? x * scale : 0, plus r (of y's dtype) where
// given (y may be r); the mask to `mask` if given. x of dtype t, y of yt: the same, or a float32 and a 16-bit float the
// one beside the other, the mask then applied in the 16-bit one (x rounded to it first), as ops/dropout.cpp's
// attribute `to`.
void dropout(DType t, DType yt, const void* x, const void* r, void* y, bool* mask, int64_t n, uint64_t seed,
             uint32_t threshold, float scale, cudaStream_t stream);
// dx = dy GELU'(x) and y = GELU(x) (the tanh form's where asked), each element as GeluGrad's and Gelu's kernels
// compute it, in one pass over x and dy (dx may be dy's buffer and y x's).
void gelu_and_grad(bool tanh_form, DType t, const void* dy, const void* x, void* dx, void* y, int64_t n,
                   cudaStream_t stream);

// The random ops (kernels/counter_random.h, as the CPU's: element i draws from counter_bits(seed, i)) into n
// elements of dtype t: uniform in [a, b) (`kind` 0), normal of mean a and scale b (1), or Bernoulli (2) with
// element i's probability p[i], of dtype pt.
void random_fill(int kind, DType t, void* y, int64_t n, uint64_t seed, float a, float b, DType pt, const void* p,
                 cudaStream_t stream);

// dst at its strides (ix.strides[0]) = src at its strides (ix.strides[1]), elements of `elem_bytes`: Transpose,
// Expand, Slice, Concat's parts, Identity.
void strided_copy(int elem_bytes, const void* src, void* dst, const Indexing& ix, cudaStream_t stream);
// strided_copy's ix of `elem_bytes`-byte elements as the same copy of wider elements, in place: where the innermost
// dim runs contiguous in both arrays, its runs grouped into elements of up to 16 bytes, as far as the run's length,
// every other stride and both pointers allow (a Transpose that keeps the last axis, Concat's and Split's parts,
// Expand of rows). The element size it leaves: elem_bytes where nothing groups. (Host code: indexing.cpp.)
int widen_contiguous_runs(Indexing& ix, int elem_bytes, const void* dst, const void* src);

// Trilu over `batch` matrices of (rows, cols), elements of `elem_bytes`: y = x where j - i >= k (upper) or
// j - i <= k (lower), else 0.
void trilu(int elem_bytes, const void* x, void* y, int64_t batch, int64_t rows, int64_t cols, int64_t k, bool upper,
           cudaStream_t stream);

// Gather along an axis: x as (outer, n, inner) elements of `elem_bytes`, idx `count` int32 or int64 indices (negative
// ones count from the end), y (outer, count, inner). An index outside [-n, n) gives zeros (the device cannot stop
// the step to say so).
void gather(int elem_bytes, const void* x, DType idx_type, const void* idx, void* y, int64_t outer, int64_t n,
            int64_t count, int64_t inner, cudaStream_t stream);
// ScatterND into `out` (holding the data already): update u (`slice` elements) goes where its k indices (idx[u * k
// + d], negative ones counting from the end of dims[d]) point, at offset sum_d index_d * strides[d]; added (atomic,
// float types) or written. An update with an index out of range is dropped.
struct NdIndex {
  int k = 0;
  int64_t dims[kMaxRank] = {}, strides[kMaxRank] = {};
};
void scatter_nd(DType t, bool add, const int64_t* idx, const void* updates, void* out, int64_t count, int64_t slice,
                const NdIndex& nd, cudaStream_t stream);
// GatherND: row r of y (`slice` elements of `elem_bytes`) = x's slice at offset (r / per_batch) * batch_stride + the
// offset row r's k indices point to (as ScatterND's); zeros for an index out of range.
void gather_nd(int elem_bytes, const int64_t* idx, const void* x, void* y, int64_t rows, int64_t per_batch,
               int64_t batch_stride, int64_t slice, const NdIndex& nd, cudaStream_t stream);

// GatherElements and ScatterElements: element i of the indices (ordered as `walk`'s shape, the indices') lies at
// offsets<2>(walk, i) in the data without its axis coordinate (strides 0) and in the indices (strides 1, as the
// updates); its index along the axis of n elements, `axis_stride` apart, is the data's coordinate there (negative
// ones counting from the end; one out of range gives a zero, or is dropped).
struct ElementIndex {
  Indexing walk;
  int64_t n = 0, axis_stride = 0;
};
void gather_elements(int elem_bytes, const void* x, DType idx_type, const void* idx, void* y, const ElementIndex& e,
                     cudaStream_t stream);
// out (holding the data already) at each index = the update there, or += it (`add`, atomic: float types).
void scatter_elements(DType t, bool add, DType idx_type, const void* idx, const void* updates, void* out,
                      const ElementIndex& e, cudaStream_t stream);

// Pad: y (out dims) from x (in dims), `before` elements added ahead on each dim (negative: cropped); a position
// outside x takes `value` (its first elem_bytes bytes; mode 0, constant), x reflected without repeating the edge
// (1), the edge (2) or x wrapped (3): ops::PadAttrs::Mode's order.
struct PadShape {
  int rank = 0, mode = 0;
  int64_t out[kMaxRank] = {}, in[kMaxRank] = {}, before[kMaxRank] = {};
};
void pad(int elem_bytes, const void* x, void* y, const PadShape& p, uint64_t value, cudaStream_t stream);

// CumSum along the middle dim of [outer, n, inner] (`exclusive`, `reverse` as ONNX's): x of dtype xt (float32,
// float16, bfloat16 summed in float32; int32, int64; bool counted), y of dtype yt (xt, int64 for bool).
void cum_sum(DType xt, DType yt, const void* x, void* y, int64_t outer, int64_t n, int64_t inner, bool exclusive,
             bool reverse, cudaStream_t stream);

// Device memory a cuBLASLt product may keep partial results in (split-K, stream-K): a slice of the node's scratch
// (workspace.h). None: the algorithms that need none.
struct Workspace {
  void* at = nullptr;
  size_t bytes = 0;
};

// Batched C = alpha * op(A) op(B) + beta * C0: A's element (i, k) of batch b at a[a_off[b] + i * a_rs + k * a_cs],
// likewise B's (k, j); C contiguous [batch, m, n]; C0 (optional) read at c0[i * c0_rs + j * c0_cs], the same in
// every batch, of dtype c0_dtype (t, or `out`). Batch offsets: the batch index decomposed over `batch` (strides 0: A,
// 1: B). float32 accumulation; C of dtype `out`: t, or float32 for 16-bit operands (the `to` attribute). C may be C0
// (an accumulation in place) where C0 is shaped as C.
struct GemmShape {
  int64_t m, n, k;
  int64_t a_rs, a_cs, b_rs, b_cs;
  Indexing batch;
  float alpha = 1, beta = 0;
  const void* c0 = nullptr;
  DType c0_dtype = DType::kFloat32;
  int64_t c0_rs = 0, c0_cs = 0;
  Workspace workspace;
};
void gemm(DType t, DType out, const void* a, const void* b, void* c, const GemmShape& s, cudaStream_t stream);
// gemm's product through cuBLASLt (lt_gemm.cpp); false, computing nothing, for one it does not take: operands with no
// unit stride, a batch that does not fold into one stride, a base of another shape, ONNXTRAIN_CUDA_GEMM=tiled.
bool lt_gemm(DType t, DType out, const void* a, const void* b, void* c, const GemmShape& s, cudaStream_t stream);

// Cross-entropy over (n, c) scores (float32, or of a 16-bit head's dtype t: dtype st) and n targets (int32 or int64, on
// the device; `ignore` skipped when has_ignore). A target out of range counts, with a NaN loss (the device cannot stop
// the step to say so).
struct CrossEntropy {  // n rows of c scores, ld apart (ld >= c; the gradient's rows the same)
  int64_t n = 0, c = 0, ld = 0;
  DType target_type = DType::kInt64;
  const void* target = nullptr;
  bool has_ignore = false;
  int64_t ignore = 0;
};
// Each row's log-sum-exp into lse and its loss into `losses` (where given; 0 for an ignored target); totals[0] +=
// the losses, totals[1] += the targets not ignored (totals: two doubles the caller zeroed); the scores rounded to
// float dtype t into `logits` (n rows of c) where it is given.
void cross_entropy_rows(const CrossEntropy& e, DType st, const void* s, float* lse, float* losses, double* totals,
                        DType t, void* logits, cudaStream_t stream);
// totals[1] += the targets not ignored.
void count_targets(const CrossEntropy& e, double* totals, cudaStream_t stream);
// loss[0] = totals[0], divided by totals[1] when `mean` (0 without a target).
void cross_entropy_total(bool mean, const double* totals, float* loss, cudaStream_t stream);
// g (n, ld; its columns past c zeros) of dtype t = w_r (exp(s - lse_r) - onehot(target_r)):
// w_r 0 for an ignored target, else dloss (per row when per_row, one number otherwise, 1 when null), divided by
// totals[1] when `mean`. g may be s.
void cross_entropy_grad(const CrossEntropy& e, DType st, const void* s, DType t, const float* lse, const float* dloss,
                        bool per_row, bool mean, const double* totals, void* g, cudaStream_t stream);
// out (n, c) = s - lse_r: the log-probabilities.
void log_probs(const float* s, const float* lse, float* out, int64_t n, int64_t c, cudaStream_t stream);
// out (c) = base (c; zeros when null) + the sum of x's n rows of c, in float32; out may be base.
void column_sums(DType t, const void* x, int64_t n, int64_t c, const void* base, void* out, cudaStream_t stream);

// com.onnxtrain.MaskedSoftmax over rows of n: y = Softmax(cond ? fill : x * scale), scale and fill scalars of dtype t
// on the device; row r of x and y (which may be x) at r * n, its mask at offsets<1>(rows, r), `cond_col` apart.
void masked_softmax(DType t, const void* x, const bool* cond, const Indexing& rows, int64_t cond_col, int64_t n,
                    const void* scale, const void* fill, void* y, cudaStream_t stream);
// Its gradient: dx = cond ? 0 : y (dy - sum(dy y)) * scale, rows as above (dx may be dy).
void masked_softmax_grad(DType t, const void* dy, const void* y, const bool* cond, const Indexing& rows,
                         int64_t cond_col, int64_t n, const void* scale, void* dx, cudaStream_t stream);

// Sums over many rows go by columns over at most kRowChunks chunks of the rows (column_chunks.cuh), their partial
// sums in the node's scratch.
constexpr int kRowChunks = 64;

// LayerNormalization over `rows` rows of n elements: y = (x - mean) rstd w[j % nw] + b[j % nb] (b optional), each
// row's mean and rstd written where given; all of dtype t but y, of dtype yt (t's, or 16 bits beside a float32 t),
// statistics computed in float32.
void layer_norm(DType t, DType yt, const void* x, const void* w, const void* b, void* y, void* mean, void* rstd,
                int64_t rows, int64_t n, int64_t nw, int64_t nb, float epsilon, cudaStream_t stream);
// Its gradient from dy (of dtype dt, as y's), x, w (n values) and the rows' mean and rstd: dx (plus base, x's
// shape, where given: dx may be base), dw and db (n values), each where given; `partial`: 2 * kRowChunks * n floats
// of scratch, for dw's and db's sums over chunks of the rows.
void layer_norm_grad(DType t, DType dt, const void* dy, const void* x, const void* w, const void* mean,
                     const void* rstd, const void* base, void* dx, void* dw, void* db, int64_t rows, int64_t n,
                     float* partial, cudaStream_t stream);

// com.onnxtrain.RMSNormalization over `rows` rows of n elements: y = x rstd w[j], rstd = 1 / sqrt(mean(x^2) +
// epsilon) written where given; all of dtype t but y, of dtype yt (as layer_norm's), the statistic computed in
// float32.
void rms_norm(DType t, DType yt, const void* x, const void* w, void* y, void* rstd, int64_t rows, int64_t n,
              float epsilon, cudaStream_t stream);
// Its gradient from dy, x, w (n values) and the rows' rstd: dx = rstd (g - x k) (plus base where given, as
// layer_norm_grad's), g = dy w, k = mean(g x) rstd^2; dw = the sum over rows of dy x rstd; each where given.
// `partial`: kRowChunks * n floats of scratch, as layer_norm_grad's; dy of dtype dt, as y's.
void rms_norm_grad(DType t, DType dt, const void* dy, const void* x, const void* w, const void* rstd,
                   const void* base, void* dx, void* dw, int64_t rows, int64_t n, float* partial,
                   cudaStream_t stream);

// com.onnxtrain.SwiGLU over n elements of dtype t: y = g sigmoid(g) u; its gradient dg = dy u s (1 + g (1 - s)) and
// du = dy g s, s = sigmoid(g), each where given. In float32.
void swiglu(DType t, const void* g, const void* u, void* y, int64_t n, cudaStream_t stream);
void swiglu_grad(DType t, const void* dy, const void* g, const void* u, void* dg, void* du, int64_t n,
                 cudaStream_t stream);

// com.onnxtrain.RotaryEmbedding over rows of `width` (even) elements, row r of x (dtype tx) and y (dtype ty) at
// r * width, its cos and sin rows (dtype tc) at offsets<2>(rows, r) (strides 0: cos, 1: sin): y1 = x1 c1 - x2 s1,
// y2 = x2 c2 + x1 s2 of the halves; `transposed`: y1 = x1 c1 + x2 s2, y2 = x2 c2 - x1 s1. In float32.
void rotary_embedding(DType tx, DType tc, DType ty, const void* x, const void* cos, const void* sin, void* y,
                      const Indexing& rows, int64_t width, bool transposed, cudaStream_t stream);

// com.onnxtrain.FlashAttention's operands: Q (pairs, tq, d), K (kv, tk, d), V (kv, tk, dv), Y (pairs, tq, dv) as rows
// (q, k, v, y: kernels/attention_rows.h), LSE (pairs, tq) in float32; d and dv at most kMaxHead. Pair p's slice of the
// mask and the bias (of those that differ: over `slices`, the batch dims either varies over), and K's batch index with
// its heads repeated `groups` times, are offsets<2> of p over `batch` (strides 0: slice, 1: K); the slice's offsets
// into the mask and the bias are offsets<2> of it over `slices` (strides 0: cond, 1: bias).
constexpr int kMaxHead = 256;
struct Attention {
  int64_t pairs = 0, tq = 0, tk = 0, d = 0, dv = 0, kv_count = 0;  // kv_count: K's and V's batch size
  AttentionRows q, k, v, y;  // (dQ's, dK's, dV's and dY's as theirs)
  AttentionRows sums;        // the backward's float32 sums of dQ (summed_dq)
  bool packed = false;       // Q, K and V in one tensor (packed_heads: then the sums are cast into it row by row)
  int64_t k_offset = 0, v_offset = 0;
  Indexing batch, slices;
  int64_t kv_heads = 1, groups = 1;
  const void* scale = nullptr;  // a scalar of the operands' dtype on the device (1 when null)
  const bool* cond = nullptr;   // where true, the score is `fill` (a scalar of the operands' dtype on the device)
  const void* fill = nullptr;
  int64_t cond_row = 0, cond_col = 0;
  const void* bias = nullptr;  // added to the scores, of the operands' dtype
  int64_t bias_row = 0, bias_col = 0;
  bool zero_masked_rows = false;
  bool dropout = false;
  uint32_t threshold = 0;
  float keep_scale = 1;
  uint64_t seed = 0;
  // What the mask and the bias do to each tile of 16 rows by 16 keys (attention_tile_kind.cuh's map, a byte each; the
  // tensor-core kernels', for 16-bit operands with a mask or a bias): a slice's of kind_rows by kind_columns tiles
  // for each slice. Scratch, filled by the launch before the kernels read it.
  uint8_t* kinds = nullptr;
  int64_t kind_rows = 0, kind_columns = 0;
  // A word after the map that its kernel sets where some tile's scores read the mask or the bias one at a time
  // (mixed), which the tensor-core kernels' lean build does not (attention_builds.cuh); the launch zeroes it first.
  // both_builds: the launch runs the lean build and the general one, each of whose blocks reads the word.
  uint32_t* mixed = nullptr;
  bool both_builds = false;
  // The pairs reading a K and V batch index kv where they lie evenly spaced (space_kv_pairs): the n-th (n <
  // kv_pairs) is kv * kv_pair_mult + n * kv_pair_step. kv_pairs 0: the backward finds them by trying every pair.
  int64_t kv_pairs = 0, kv_pair_mult = 0, kv_pair_step = 0;
};
// Sets a's kv_pairs, kv_pair_mult and kv_pair_step from its batch, groups and kv_count where every K and V batch
// index is read by as many pairs, evenly spaced from kv * kv_pair_mult in increasing order: heads read by a pair each,
// grouped-query heads (a run of pairs each), K and V broadcast over a batch dim (pairs a batch apart); else kv_pairs 0.
void space_kv_pairs(Attention& a);
// The map's tiles: 16 rows by 16 keys. Whether operands of dtype t with a mask or a bias (`masked`) have one: those
// the tiled kernels take (16-bit and float32 ones; float32 heads over 64 take the warp-per-row kernels, which read
// no map). Its bytes: a slice's tiles times the slices, and the same with
// the word after it (size_kinds, setting a.kind_rows and a.kind_columns first); place_map puts both at `at`.
constexpr int64_t kKindRows = 16, kKindKeys = 16;
inline bool mapped(DType t, bool masked) {
  return masked && (t == DType::kFloat16 || t == DType::kBFloat16 || t == DType::kFloat32);
}
ONNXTRAIN_HOST_DEVICE int64_t kind_slices(const Attention& a) {
  int64_t n = 1;
  for (int d = 0; d < a.slices.rank; ++d) n *= a.slices.dims[d];
  return n;
}
inline int64_t kinds_count(const Attention& a) { return a.kind_rows * a.kind_columns * kind_slices(a); }
constexpr int64_t kMixedBytes = 4;  // Attention::mixed
inline int64_t size_kinds(Attention& a) {
  a.kind_rows = (a.tq + kKindRows - 1) / kKindRows;
  a.kind_columns = ((a.tk + kKindKeys - 1) / kKindKeys + 3) / 4 * 4;  // (4 a word: a step's 64 keys)
  return kinds_count(a) + kMixedBytes;
}
inline void place_map(Attention& a, uint8_t* at) {
  a.kinds = at;
  a.mixed = reinterpret_cast<uint32_t*>(at + kinds_count(a));  // (rows of whole words)
}
void flash_attention(DType t, const Attention& a, const void* q, const void* k, const void* v, void* y, float* lse,
                     cudaStream_t stream);
// Whether the backward sums dQ in float32 scratch: the tiled kernels sum it over their blocks of keys by atomics, the
// tensor-core ones' (16-bit operands, heads up to 128) in scratch lying as dQ, cast into it after; the float32 ones'
// (heads up to 64) in dQ itself, but where Q, K and V lie side by side (packed: then in rows of their own, copied into
// dX's after).
inline bool summed_dq(DType t, int64_t d, int64_t dv, bool packed) {
  if (t == DType::kFloat32) return packed && std::max(d, dv) <= 64;
  return (t == DType::kFloat16 || t == DType::kBFloat16) && std::max(d, dv) <= 128;
}
// dQ, dK and dV; row_dots: pairs * tq floats of scratch; dq_sums: pairs * tq * d floats of scratch where summed_dq,
// else null.
void flash_attention_grad(DType t, const Attention& a, const void* dy, const void* q, const void* k, const void* v,
                          const void* y, const float* lse, float* row_dots, float* dq_sums, void* dq, void* dk,
                          void* dv, cudaStream_t stream);

// onnxtrain.optim's updates (kernels/parameter_update.h) over n elements of dtype t (float32, bfloat16, float16;
// float64), in place: AdamW at `step` (vmax with amsgrad, else null), SGD (buf with momentum, else null; `first` sets
// it), and acc += g.
void adamw(DType t, void* x, const void* g, void* m, void* v, void* vmax, int64_t n, const AdamWHyper& h,
           int64_t step, cudaStream_t stream);
void sgd(DType t, void* x, const void* g, void* buf, bool first, int64_t n, const SgdHyper& h, cudaStream_t stream);
void accumulate(DType t, void* acc, const void* g, int64_t n, cudaStream_t stream);

enum class Reduce { kSum, kMean, kMax, kMin, kSumSquare, kL2 };
// out[o] = reduce of x over the reduced sub-space: output index o decomposed over `kept` (strides 0: x), each
// reduced element r over `reduced` (strides 0: x). float32 accumulation.
void reduce(Reduce op, DType t, const void* x, void* out, const Indexing& kept, const Indexing& reduced,
            cudaStream_t stream);
// out (n) = the sum of x's rows (rows, n) divided by `divisor` (1, or rows for a mean), by columns over chunks of
// the rows (a reduction over leading dims: a Linear's bias gradient); partial: kRowChunks * n floats of scratch.
void column_reduce(DType t, const void* x, int64_t rows, int64_t n, float divisor, float* partial, void* out,
                   cudaStream_t stream);
// Softmax (or LogSoftmax) along the middle dim of an [outer, cols, inner] array.
void softmax(DType t, bool log, const void* x, void* y, int64_t outer, int64_t cols, int64_t inner,
             cudaStream_t stream);

}  // namespace onnxtrain::kernels::cuda
