// What a tile of a pair's scores takes from the mask and the additive bias, for the tensor-core attention kernels
// (attention_mma.cuh): nothing, as every score of a causal mask's upper tiles is -inf (skipped); nothing either where
// neither changes any score, as a causal mask's lower tiles (the kernels then read neither per score); else the mask
// and the bias at each score (the diagonal's tiles). A block votes on a tile, a row read 16 bytes at a time (16 mask
// or 8 bias elements) where its rows lie whole and aligned, else an element at a time: once a call, for tiles of 16
// rows by 64 keys, into a map (Attention::kinds) the kernels read a byte a tile of from then on.
#pragma once
#include <cstdint>
#include <cstring>

#include "kernels/cuda/attention_tiles.cuh"

namespace onnxtrain::kernels::cuda::ONNXTRAIN_MMA_ATTENTION {

enum class TileKind { kDead, kPlain, kMixed };  // every score -inf; no score changed; a score changed

// A thread's share of the vote: some score of its is other than -inf (live), some score the mask or the bias
// changes (touched).
struct TileVote {
  int live = 0, touched = 0;
  __device__ __forceinline__ void masked(float fill) {
    touched = 1;
    live |= fill != -INFINITY;
  }
  __device__ __forceinline__ void biased(float b) {
    touched |= b != 0.f;
    live |= b != -INFINITY;
  }
};

template <typename T>
__device__ __forceinline__ void vote_at(const Attention& a, const AttentionPair<T>& p, int64_t r, int64_t j,
                                        float fill, TileVote& v) {
  if (masked(a, p.cond, r, j))
    v.masked(fill);
  else
    v.biased(bias_at(a, p.bias, r, j));
}

// Nonzero exactly where some byte of x is 0 (the lowest zero byte's top bit survives in x - 0x01010101 and ~x).
__device__ __forceinline__ uint32_t zero_byte(uint32_t x) { return (x - 0x01010101u) & ~x & 0x80808080u; }

// Elements j .. j + W - 1 of row r, from one 16-byte read: the mask's (W = 16) or the bias's (W = 8).
template <typename T, int W>
__device__ __forceinline__ void vote_wide(const Attention& a, const AttentionPair<T>& p, int64_t r, int64_t j,
                                          float fill, TileVote& v) {
  if constexpr (W == 16) {
    const uint4 w = *reinterpret_cast<const uint4*>(p.cond + r * a.cond_row + j);
    if (w.x | w.y | w.z | w.w) v.masked(fill);  // a byte set: a score masked
    if (zero_byte(w.x) | zero_byte(w.y) | zero_byte(w.z) | zero_byte(w.w)) v.live = 1;  // a byte clear: one not
  } else {
    const uint4 w = *reinterpret_cast<const uint4*>(p.bias + r * a.bias_row + j);
    T e[8];
    memcpy(static_cast<void*>(e), &w, 16);
#pragma unroll
    for (int k = 0; k < 8; ++k) v.biased(to_float(e[k]));
  }
}

// Rows r0 .. r0 + R - 1 by keys j0 .. j0 + C - 1 (j0 a multiple of 16) of pair p: scores past the rows or the keys
// are -inf whatever the mask says, and are not read.
template <int W, typename T, int R, int C>
__device__ __forceinline__ void vote_rows(const Attention& a, const AttentionPair<T>& p, int64_t r0, int64_t j0,
                                          float fill, TileVote& v) {
  for (int i = threadIdx.x; i < R * C / W; i += kBlock) {
    const int64_t r = r0 + i / (C / W), j = j0 + i % (C / W) * W;
    if (r >= a.tq || j >= a.tk) continue;
    if (j + W <= a.tk) {
      vote_wide<T, W>(a, p, r, j, fill, v);
      continue;
    }
    for (int64_t k = j; k < a.tk; ++k) vote_at(a, p, r, k, fill, v);
  }
}

template <typename T, int R, int C>
__device__ __forceinline__ TileKind tile_kind(const Attention& a, const AttentionPair<T>& p, int64_t r0, int64_t j0,
                                              float fill) {
  if (!a.cond && !a.bias) return TileKind::kPlain;
  static_assert(C % 16 == 0 && sizeof(T) == 2, "a tile's rows as 16-byte reads of a 16-bit bias or of bools");
  auto aligned = [](const void* m) { return reinterpret_cast<uintptr_t>(m) % 16 == 0; };
  TileVote v;
  if (a.cond && !a.bias && a.cond_col == 1 && a.cond_row % 16 == 0 && aligned(p.cond)) {
    vote_rows<16, T, R, C>(a, p, r0, j0, fill, v);
  } else if (a.bias && !a.cond && a.bias_col == 1 && a.bias_row % 8 == 0 && aligned(p.bias)) {
    vote_rows<8, T, R, C>(a, p, r0, j0, fill, v);
  } else {
    for (int i = threadIdx.x; i < R * C; i += kBlock) {
      const int64_t r = r0 + i / C, j = j0 + i % C;
      if (r < a.tq && j < a.tk) vote_at(a, p, r, j, fill, v);
    }
  }
  const int live = __syncthreads_or(v.live), touched = __syncthreads_or(v.touched);
  return !live ? TileKind::kDead : touched ? TileKind::kMixed : TileKind::kPlain;
}

static_assert(kKindKeys == kTile, "the map's tiles span a step's keys");

// The map: a block a tile (grid: the slices x kind_rows x kind_columns, kBlock threads). (Its dims come with the
// kernels' parameters, where they take no register.)
template <typename T>
__global__ void __launch_bounds__(kBlock) tile_kinds(Attention a) {
  const int64_t per_slice = a.kind_rows * a.kind_columns, slice = blockIdx.x / per_slice;
  const int64_t at = blockIdx.x % per_slice, r0 = at / a.kind_columns * kKindRows, j0 = at % a.kind_columns * kTile;
  const TileKind k = tile_kind<T, kKindRows, kTile>(a, slice_of<T>(a, slice, 0), r0, j0, scalar_or<T>(a.fill, 0.f));
  if (threadIdx.x == 0) a.kinds[blockIdx.x] = uint8_t(k);
}

// The kind of rows r0 .. r0 + R - 1 (R and r0 multiples of 16) by keys j0 .. j0 + 63 of a pair of slice `slice`,
// from the map: its 16-row tiles' that hold rows of the pair, one kind where they agree, else mixed (as a vote over
// the whole).
template <int R>
__device__ __forceinline__ TileKind kind_of(const Attention& a, int64_t slice, int64_t r0, int64_t j0) {
  static_assert(R % kKindRows == 0, "whole tiles of the map");
  if (!a.cond && !a.bias) return TileKind::kPlain;
  const uint8_t* m = a.kinds + (slice * a.kind_rows + r0 / kKindRows) * a.kind_columns + j0 / kTile;
  TileKind k = TileKind(m[0]);
  for (int i = 1; i < R / kKindRows && r0 + kKindRows * i < a.tq; ++i)
    if (TileKind(m[i * a.kind_columns]) != k) k = TileKind::kMixed;
  return k;
}

}  // namespace onnxtrain::kernels::cuda::ONNXTRAIN_MMA_ATTENTION
