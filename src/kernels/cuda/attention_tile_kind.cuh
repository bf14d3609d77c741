// What a tile of a pair's scores takes from the mask and the additive bias, for the tiled attention kernels (the
// tensor-core ones of attention_mma.cuh, the float32 ones of attention_f32.cuh): nothing, as every score of a causal
// mask's upper tiles is -inf (skipped); nothing either where neither changes any score, as a causal mask's lower tiles
// (the kernels then read neither per score); -inf above the diagonal of each of its 16 x 16 tiles and nothing on and
// under it, as a causal mask's diagonal tiles (causal: the kernels compare a score's place in its tile, and read
// neither); else the mask and the bias at each score. A warp votes on a tile, a row read 16 bytes at a time (16 mask
// elements, or 8 or 4 of a bias) where its rows lie whole and aligned, else an element at a time, a kind for each 16
// keys: once a call, for tiles of 16 rows by 16 keys, into a map (Attention::kinds) the kernels read a byte a tile of
// from then on (a warp's rows by a group of keys).
#pragma once
#include <cstdint>
#include <cstring>

#include "kernels/cuda/attention_tiles.cuh"

namespace onnxtrain::kernels::cuda::ONNXTRAIN_MMA_ATTENTION {

// Every score -inf; no score changed; a score changed; -inf above the diagonal of each 16 x 16 tile (a key past the
// row, counted from the tile's first), none changed on and under it.
enum class TileKind { kDead, kPlain, kMixed, kCausal };

// A thread's share of the vote: some score of its is other than -inf (live), some score the mask or the bias
// changes (touched), some score departs from a causal tile's: -inf above its 16 x 16 tile's diagonal, unchanged on
// and under it (departs). (Scores past the rows or the keys vote not: -inf whatever the kind, the kernels see to it.)
struct TileVote {
  int live = 0, touched = 0, departs = 0;
  __device__ __forceinline__ void masked(float fill, bool above) {
    touched = 1;
    live |= fill != -INFINITY;
    departs |= !above || fill != -INFINITY;
  }
  __device__ __forceinline__ void biased(float b, bool above) {
    touched |= b != 0.f;
    live |= b != -INFINITY;
    departs |= above ? b != -INFINITY : b != 0.f;
  }
};

// Whether score (r, j) lies above the diagonal of its 16 x 16 tile of the map (r0 and j0 tiles' first).
__device__ __forceinline__ bool above_diagonal(int64_t r, int64_t j, int64_t r0, int64_t j0) {
  return (j - j0) % kKindKeys > (r - r0) % kKindRows;
}

template <typename T>
__device__ __forceinline__ void vote_at(const Attention& a, const AttentionPair<T>& p, int64_t r, int64_t j,
                                        bool above, float fill, TileVote& v) {
  if (masked(a, p.cond, r, j))
    v.masked(fill, above);
  else
    v.biased(bias_at(a, p.bias, r, j), above);
}

// The 8 mask bytes from key j (j % 16: 0 or 8 of its 16 x 16 tile) of a causal tile's row rl: 1 past the row.
__device__ __forceinline__ uint64_t causal_bytes(int rl, int j) {
  const int first = rl + 1 - j;  // the first byte set
  return first <= 0 ? 0x0101010101010101ull : first >= 8 ? 0ull : 0x0101010101010101ull << (8 * first);
}

// Nonzero exactly where some byte of x is 0 (the lowest zero byte's top bit survives in x - 0x01010101 and ~x).
__device__ __forceinline__ uint32_t zero_byte(uint32_t x) { return (x - 0x01010101u) & ~x & 0x80808080u; }

// Elements j .. j + W - 1 of row r, from one 16-byte read: the mask's (W = 16, j a tile's first key) or the bias's (W =
// 8 of a 16-bit bias, 4 of a float32 one; j a multiple of W in the tile); rl, jl: r's and j's place in their 16 x 16
// tile.
template <typename T, int W>
__device__ __forceinline__ void vote_wide(const Attention& a, const AttentionPair<T>& p, int64_t r, int64_t j,
                                          int rl, int jl, float fill, TileVote& v) {
  if constexpr (W == 16) {
    const uint4 w = *reinterpret_cast<const uint4*>(p.cond + r * a.cond_row + j);
    if (w.x | w.y | w.z | w.w) v.masked(fill, true);  // a byte set: a score masked
    if (zero_byte(w.x) | zero_byte(w.y) | zero_byte(w.z) | zero_byte(w.w)) v.live = 1;  // a byte clear: one not
    const uint64_t lo = w.x | uint64_t(w.y) << 32, hi = w.z | uint64_t(w.w) << 32;
    v.departs |= lo != causal_bytes(rl, 0) || hi != causal_bytes(rl, 8);  // (bools: bytes of 0 and 1)
  } else {
    const uint4 w = *reinterpret_cast<const uint4*>(p.bias + r * a.bias_row + j);
    T e[W];
    memcpy(static_cast<void*>(e), &w, 16);
#pragma unroll
    for (int k = 0; k < W; ++k) v.biased(to_float(e[k]), jl + k > rl);
  }
}

// A thread's votes for a tile's groups of 16 keys (kKindKeys): bit g of each for group g.
struct GroupVotes {
  uint32_t live = 0, touched = 0, departs = 0;
  __device__ __forceinline__ void add(int g, const TileVote& v) {
    live |= uint32_t(v.live) << g;
    touched |= uint32_t(v.touched) << g;
    departs |= uint32_t(v.departs) << g;
  }
};

// Rows r0 .. r0 + R - 1 by keys j0 .. j0 + C - 1 (r0 and j0 multiples of 16) of pair p, each score's vote in its
// group of 16 keys, this thread's reads from the `first` on, `stride` apart: scores past the rows or the keys are
// -inf whatever the mask says, and are not read.
template <int W, typename T, int R, int C>
__device__ __forceinline__ void vote_rows(const Attention& a, const AttentionPair<T>& p, int64_t r0, int64_t j0,
                                          float fill, int first, int stride, GroupVotes& v) {
  for (int i = first; i < R * C / W; i += stride) {
    const int64_t r = r0 + i / (C / W), j = j0 + i % (C / W) * W;
    if (r >= a.tq || j >= a.tk) continue;
    TileVote mine;
    if (j + W <= a.tk)
      vote_wide<T, W>(a, p, r, j, int((r - r0) % kKindRows), int((j - j0) % kKindKeys), fill, mine);
    else
      for (int64_t k = j; k < a.tk; ++k) vote_at(a, p, r, k, above_diagonal(r, k, r0, j0), fill, mine);
    v.add(int(i % (C / W) * W / kKindKeys), mine);
  }
}

// This thread's votes on rows r0 .. r0 + R - 1 by keys j0 .. j0 + C - 1, a group of 16 keys each, its reads from the
// `first` on, `stride` apart (a mask or a bias given).
template <typename T, int R, int C>
__device__ __forceinline__ GroupVotes votes(const Attention& a, const AttentionPair<T>& p, int64_t r0, int64_t j0,
                                            float fill, int first, int stride) {
  static_assert(C % kKindKeys == 0 && (sizeof(T) == 2 || sizeof(T) == 4), "a tile's rows as 16-byte reads");
  constexpr int kBiasWide = 16 / int(sizeof(T));  // a bias's elements a 16-byte read
  auto aligned = [](const void* m) { return reinterpret_cast<uintptr_t>(m) % 16 == 0; };
  GroupVotes v;
  if (a.cond && !a.bias && a.cond_col == 1 && a.cond_row % 16 == 0 && aligned(p.cond)) {
    vote_rows<16, T, R, C>(a, p, r0, j0, fill, first, stride, v);
  } else if (a.bias && !a.cond && a.bias_col == 1 && a.bias_row % kBiasWide == 0 && aligned(p.bias)) {
    vote_rows<kBiasWide, T, R, C>(a, p, r0, j0, fill, first, stride, v);
  } else {
    for (int i = first; i < R * C; i += stride) {
      const int64_t r = r0 + i / C, j = j0 + i % C;
      if (r >= a.tq || j >= a.tk) continue;
      TileVote mine;
      vote_at(a, p, r, j, above_diagonal(r, j, r0, j0), fill, mine);
      v.add(i % C / kKindKeys, mine);
    }
  }
  return v;
}

// A group's kind from whether some vote on it found a live score, a touched one, one departing from a causal tile.
__device__ __forceinline__ TileKind kind_voted(bool live, bool touched, bool departs) {
  return !live ? TileKind::kDead : !touched ? TileKind::kPlain : departs ? TileKind::kMixed : TileKind::kCausal;
}

// One kind for several: theirs where they agree, else mixed (as one vote over them all).
__device__ __forceinline__ TileKind merged(TileKind a, TileKind b) { return a == b ? a : TileKind::kMixed; }

static_assert(kTile % kKindKeys == 0, "a step's keys are whole groups of the map");

// The map: a warp for 16 rows by a step's 64 keys (kBlock / 32 of them a block), its groups' kinds voted by the
// warp's ballots, and a.mixed set where one is mixed (attention_builds.cuh). (A block for each, voting by twelve
// barriers, had taken 42 us for GPT-2's mask at batch 16 on an H200, 24 calls a step.) Its dims come with the
// kernels' parameters, where they take no register.
constexpr int kMapWarps = kBlock / 32;
template <typename T>
__global__ void __launch_bounds__(kBlock) tile_kinds(Attention a) {
  const int64_t steps = (a.tk + kTile - 1) / kTile, per_slice = a.kind_rows * steps;
  const int64_t id = int64_t(blockIdx.x) * kMapWarps + threadIdx.x / 32, slice = id / per_slice;
  if (slice >= kind_slices(a)) return;  // (the last block's spare warps)
  const int lane = int(threadIdx.x % 32);
  const int64_t at = id % per_slice, r0 = at / steps * kKindRows, j0 = at % steps * kTile;
  GroupVotes v;
  const bool read = a.cond || a.bias;
  if (read) v = votes<T, kKindRows, kTile>(a, slice_of<T>(a, slice, 0), r0, j0, scalar_or<T>(a.fill, 0.f), lane, 32);
  uint8_t* row = a.kinds + (slice * a.kind_rows + r0 / kKindRows) * a.kind_columns + j0 / kKindKeys;
#pragma unroll
  for (int g = 0; g < kTile / kKindKeys; ++g) {
    const TileKind k = !read ? TileKind::kPlain
                             : kind_voted(__ballot_sync(~0u, int(v.live >> g & 1)) != 0,
                                          __ballot_sync(~0u, int(v.touched >> g & 1)) != 0,
                                          __ballot_sync(~0u, int(v.departs >> g & 1)) != 0);
    if (lane == g && j0 + kKindKeys * g < a.tk) {  // (lane g writes group g's)
      row[g] = uint8_t(k);
      if (k == TileKind::kMixed) *a.mixed = 1u;
    }
  }
}
inline int64_t tile_kinds_blocks(const Attention& a) {
  return (kind_slices(a) * a.kind_rows * ((a.tk + kTile - 1) / kTile) + kMapWarps - 1) / kMapWarps;
}

// The kind of rows r0 .. r0 + R - 1 by keys j0 .. j0 + C - 1 (each a multiple of 16) of a pair of slice `slice`,
// from the map: its tiles' that hold rows and keys of the pair, merged; dead where it holds none. A step's 64 keys
// inside the rows and the keys (j0 a multiple of 64): each 16 rows' 4 tiles as a word (the map's rows padded to
// whole words), one kind where every byte is the first's.
template <int R, int C>
__device__ __forceinline__ TileKind kind_of(const Attention& a, int64_t slice, int64_t r0, int64_t j0) {
  static_assert(R % kKindRows == 0 && C % kKindKeys == 0, "whole tiles of the map");
  if (r0 >= a.tq || j0 >= a.tk) return TileKind::kDead;
  if (!a.cond && !a.bias) return TileKind::kPlain;
  const uint8_t* m = a.kinds + (slice * a.kind_rows + r0 / kKindRows) * a.kind_columns + j0 / kKindKeys;
  if constexpr (C == 4 * kKindKeys) {
    if (r0 + R <= a.tq && j0 + C <= a.tk && j0 % C == 0) {
      const uint32_t first = *reinterpret_cast<const uint32_t*>(m);
      uint32_t differ = first ^ (first & 0xFFu) * 0x01010101u;
#pragma unroll
      for (int i = 1; i < R / kKindRows; ++i)
        differ |= first ^ *reinterpret_cast<const uint32_t*>(m + i * a.kind_columns);
      return differ ? TileKind::kMixed : TileKind(first & 0xFFu);
    }
  }
  TileKind k = TileKind(m[0]);
  for (int i = 0; i < R / kKindRows && r0 + kKindRows * i < a.tq; ++i)
    for (int c = 0; c < C / kKindKeys && j0 + kKindKeys * c < a.tk; ++c)
      k = merged(k, TileKind(m[i * a.kind_columns + c]));
  return k;
}

// A tile a step visits: where it starts (its first key, or query row) and its kind.
struct Live {
  int64_t at;
  TileKind kind;
};

// The tiles numbered 0 .. count - 1 that a block steps over in order (a block of query rows' tiles of keys, a block
// of keys' tiles of a pair's query rows), read 32 at a time: lane i holds the kind of tile base + i from the map, the
// warp the live ones (not dead) a bit each. A block reads the map once in 32 tiles it steps over, not every step (a
// read whose latency each step waited for), and a run of dead tiles (a causal mask's upper ones) costs one read.
// Every lane of the warp calls next with the same arguments.
struct LiveTiles {
  int base = -32;  // (none held)
  unsigned live = 0;
  int mine = 0;
  // The first live tile numbered from `from` on: {its number, its kind}, or {count or more, dead} where none is
  // (kind(n): tile n's kind, read where it is not held).
  struct At {
    int n;
    TileKind kind;
  };
  template <typename Kind>
  __device__ __forceinline__ At next(int from, int count, Kind&& kind) {
    for (;;) {
      if (from >= base && from < base + 32) {
        const unsigned left = live & (~0u << unsigned(from - base));
        if (left) {
          const int at = __ffs(int(left)) - 1;
          return {base + at, TileKind(__shfl_sync(0xffffffffu, mine, at))};
        }
        from = base + 32;
      }
      if (from >= count) return {from, TileKind::kDead};
      base = from;
      const int n = base + int(threadIdx.x % 32);
      const TileKind k = n < count ? kind(n) : TileKind::kDead;
      mine = int(k);
      live = __ballot_sync(0xffffffffu, k != TileKind::kDead);
    }
  }
};

}  // namespace onnxtrain::kernels::cuda::ONNXTRAIN_MMA_ATTENTION
