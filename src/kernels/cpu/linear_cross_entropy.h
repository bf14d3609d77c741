// What the CPU kernels of com.onnxtrain.LinearCrossEntropy share: linear_cross_entropy.cpp (forward, and backward
// by blocks of rows) and linear_cross_entropy_blocks.cpp (blocks of scores, the gradients forward forms by blocks
// of classes, and forward's loss pass).
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/kernel.h"
#include "ops/loss.h"

namespace onnxtrain::kernels::lce {

using ops::LossAttrs;

// Scratch for one block of scores, and the most rows a block of rows takes.
constexpr int64_t kBlockBytes = int64_t(1) << 23, kMaxRows = 256;

// Sizes of one call, checked: X (n, k) as rows, W (c, k), B (c)?, the targets (n) each a class or ignored.
struct Rows {
  int64_t n = 0, k = 0, c = 0;
  std::vector<int64_t> target;
  int64_t valid = 0;  // targets not ignored
  // A 16-bit head's dtype (bfloat16 or float16; the node's, also where its kernel runs on float32 copies), which its
  // scores are rounded to as autocast's Linear writes them; float32 for a head of float32 or float64.
  DType rounded = DType::kFloat32;
};

inline bool ignored(const LossAttrs& a, int64_t t) { return a.has_ignore && t == a.ignore_index; }

template <typename T>
inline T mean_scale(const LossAttrs& a, const Rows& r) {
  return a.reduction == LossAttrs::kMean ? T(r.valid ? 1.0 / double(r.valid) : 0.0) : T(1);
}

// A block of the (N, C) scores: rows [r0, r0 + m), classes [c0, c0 + cb), held (m, cb) row-major.
struct Block {
  int64_t r0, m, c0, cb;
};

// s = the block's scores, X W^T + B, rounded to r.rounded; in float32 for bfloat16 (autocast's head's are its
// Linear's bf16 output, read as float32 by its loss: the same values).
template <typename T>
void block_scores(const Rows& r, const T* x, const T* w, const T* b, const Block& k, T* s);
void block_scores(const Rows& r, const BFloat16* x, const BFloat16* w, const BFloat16* b, const Block& k, float* s);

// What the gradients need of a row beyond its scores s (as PyTorch's float32 log_softmax keeps them, and the target's
// more precisely): its largest score, the log of l = sum exp(s - max), and 1 - p_target = (l - exp(s_t - max)) / l,
// summed without the target's term (0 where ignored). One float32 log-sum-exp would lose ulp(max + log l) in
// exp(s - lse) and lse - s_t, ~2e-6 at logits of 30: most of 1 - p of a near-certain target.
template <typename T>
struct RowStats {
  T* max;
  T* log_sum;
  T* miss;
};

// The block's scores in s turned into their gradient in place: per * (softmax - onehot(target)), 0 for an ignored
// target (per: dloss, one per row for reduction "none", else one, times `scale`: 1 / valid for "mean"); from
// `stats` of the rows, or with none, of the block's own rows, each whole (all C classes).
template <typename T>
void block_gradients(const LossAttrs& a, const Rows& r, const T* dloss, T scale, const RowStats<T>* stats,
                     const Block& k, T* s);

// Classes per column block of a forward that forms the gradients: a (N, width) block of scores fills at most 8
// MiB, unless that is under 256 classes (then 256), and never more than C.
int64_t column_width(int64_t rows, int64_t classes, size_t elem);

// The gradients of forward (outputs 2-4 of `c`: dX, dW, dB for a loss gradient of 1) of X, W, B in S, computing in
// A, from the loss pass's row statistics: `s` scratch for a (N, column_width) block of A, `scratch` carving the rest
// (for bfloat16: the block's bf16 copy and a float32 dX).
template <typename S, typename A>
void forward_gradients(const LossAttrs& a, const Rows& r, KernelCtx& c, A* s, const RowStats<A>& stats,
                       ScratchCarver& scratch);

// Forward's loss pass: each row's statistics in `stats` and its loss in `loss` (0 where ignored; -log p_target as
// log1p((l - e_t) / e_t), the target's term e_t = exp(s_t - max) apart), the scores written to output 5 when asked
// for, and `with_dx`, dX (output 2, a frozen head's: no dW nor dB asked for) for a loss gradient of 1; one pass
// over blocks of classes. `s` holds a (N, column_width) block; `scratch` carves, for a bfloat16 dX, a bf16 block
// and a float32 dX.
template <typename S, typename A>
void loss_pass(const LossAttrs& a, const Rows& r, KernelCtx& c, A* s, const RowStats<A>& stats, A* loss,
               bool with_dx, ScratchCarver& scratch);

}  // namespace onnxtrain::kernels::lce
