// What the tensor-core attention kernels (attention_mma.cuh) do to a warp's scores in a step: a score from its
// product, whether a warp's scores lie inside the pair's and plain, the kinds of a warp's groups of 16 keys (the map
// of attention_tile_kind.cuh) and which scores of groups that read neither mask nor bias are -inf, dropout's mask
// of a warp's scores in a tile, and the slots a step's operands are staged in.
#pragma once
#include "kernels/cuda/attention_builds.cuh"
#include "kernels/cuda/attention_tile_kind.cuh"

namespace onnxtrain::kernels::cuda::ONNXTRAIN_MMA_ATTENTION {

// Score (r, j) of a pair from its product qk: -inf past the keys or the rows, which read no mask; in a tile
// neither the mask nor the bias changes (plain), qk scaled; else the fill where masked, or scale qk + bias.
template <typename T>
__device__ __forceinline__ float score(const Attention& a, const AttentionPair<T>& p, float qk, int64_t r, int64_t j,
                                       float scale, float fill, bool plain) {
  if (r >= a.tq || j >= a.tk) return -INFINITY;
  if (plain) return qk * scale;
  return masked(a, p.cond, r, j) ? fill : qk * scale + bias_at(a, p.bias, r, j);
}

// Whether the scores of the rows before r_end by the keys before j_end that a warp holds all lie inside the pair's
// scores, in a tile the mask and the bias leave as they are: they are then the products scaled, with no test an
// element.
__device__ __forceinline__ bool inside(const Attention& a, TileKind kind, int64_t r_end, int64_t j_end) {
  return kind == TileKind::kPlain && r_end <= a.tq && j_end <= a.tk;
}

// The kinds of a warp's 16 rows from r0 by each 16 keys of the tile from j0 (the forward's): the tile's where it is
// not mixed, else each group's from the map (a causal mask's diagonal tile: the warp's diagonal group causal, those
// left of it plain, those right of it dead).
struct Groups {
  TileKind k[kTile / kKindKeys];
  __device__ __forceinline__ TileKind of(int nt) const { return k[nt * 8 / kKindKeys]; }  // of 8-key tile nt
  // Whether some group's scores read the mask or the bias.
  __device__ __forceinline__ bool read() const {
    bool any = false;
#pragma unroll
    for (TileKind x : k) any |= x == TileKind::kMixed;
    return any;
  }
};

// The rows or keys from `from` on before `end`, at most `most` (those a warp's or a step's tile holds).
__device__ __forceinline__ int left(int64_t end, int64_t from, int most) {
  return int(end - from < most ? end - from : most);
}
// Whether score (row, key) of a warp's tile (counted from its first row and first key, each a multiple of 16) is -inf
// though its group reads neither the mask nor the bias: the group's dead, the score lies above a causal group's
// diagonal, or past the rows or the keys (rows_in, keys_in: left() from the tile's first row and first key).
__device__ __forceinline__ bool off_unread(TileKind k, int row, int key, int rows_in, int keys_in) {
  return k == TileKind::kDead || (k == TileKind::kCausal && key % kKindKeys > row % kKindRows) || row >= rows_in ||
         key >= keys_in;
}
__device__ __forceinline__ Groups groups_of(const Attention& a, TileKind kind, int64_t slice, int64_t r0,
                                            int64_t j0) {
  Groups g;
#pragma unroll
  for (int q = 0; q < kTile / kKindKeys; ++q)
    g.k[q] = kind == TileKind::kMixed ? kind_of<kKindRows, kKindKeys>(a, slice, r0, j0 + kKindKeys * q) : kind;
  return g;
}

// A warp's scores x in a tile (the forward's: rows row0 + g and row0 + g + 8, flat over the pairs, by keys j0 ..
// j0 + 63) through dropout's mask: the dropped ones 0, the kept ones as they are (keep_scale: the caller's, once for
// the whole; drop_scale()). Where score rows are whole blocks of the draw, a row's block key (key_of[r] for the
// warp's row r, staged) and a draw for keys c and c + 8 (tiles nt and nt + 1, nt even); else a draw a score (the
// general build's alone).
static_assert(kTile == int(kDropoutBlock), "a step's keys are a block of dropout's draw");
template <bool kLean>
__device__ __forceinline__ void drop_rows(float (&x)[kTile / 8][4], const Attention& a, const uint32_t* key_of,
                                          int64_t row0, int64_t j0, int g, int t) {
  if (kLean || blocked_rows(a)) {
    const uint32_t key[2] = {key_of[g], key_of[g + 8]};
#pragma unroll
    for (int nt = 0; nt < kTile / 8; nt += 2)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const uint32_t d = dropout_draw(key[i / 2], uint32_t(column_of(nt, i, t)));
        if (!dropout_half_keeps(d, false, a.threshold)) x[nt][i] = 0.f;
        if (!dropout_half_keeps(d, true, a.threshold)) x[nt + 1][i] = 0.f;
      }
  } else {
#pragma unroll
    for (int nt = 0; nt < kTile / 8; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        if (!keeps(a, row0 + row_of(i, g), j0 + column_of(nt, i, t))) x[nt][i] = 0.f;
  }
}
// What the kept ones take, once for all of them: keep_scale under dropout, else 1.
__device__ __forceinline__ float drop_scale(const Attention& a) { return a.dropout ? a.keep_scale : 1.f; }
// Whether keep bits (bit 4 nt + i for accumulator element i of 8-column tile nt: the backward's) keep an element.
__device__ __forceinline__ bool kept_bit(uint32_t bits, int nt, int i) { return (bits >> (4 * nt + i)) & 1u; }

// The slots a kernel stages its steps' operands in (step_ahead()): two (the next step's copied while the warps work on
// this one's) where they fit in 48 KiB of static shared memory, one for heads of 128.
template <int D>
constexpr int kStages = D > 64 ? 1 : 2;

}  // namespace onnxtrain::kernels::cuda::ONNXTRAIN_MMA_ATTENTION
