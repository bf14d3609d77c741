// FlashAttention on tensor cores for 16-bit operands, FlashAttention-2's scheme (warp_mma.cuh's products): a block
// of 4 warps owns 64 query rows (16 a warp) and steps over the keys 64 at a time, K's and V's rows staged in
// shared memory as they lie in global memory (by cp.async; where two stages fit, the next step's copied while the
// warps work on this one's) and read as operands by ldmatrix; scores, probabilities and the output stay in
// registers, rescaled by the online softmax, the probabilities fed to the next product as they are. The backward
// (attention_grad.cuh) recomputes each probability from the row's log-sum-exp in one kernel that owns 64 keys of a K
// and V batch index (dK, dV) and steps over the query rows of every pair reading them (grouped-query heads summed
// there), adding each step's share of dQ to float32 sums by atomics. Masks, biases, the fill of masked scores,
// dropout (the CPU's counter-based draw, a block key a row of 64 keys) and fully masked rows as the warp-per-row
// kernels (attention.cu) and the CPU's; tiles whose every score is -inf (a causal mask's upper ones) skipped, and the
// mask and the bias read per score only in tiles they change irregularly (attention_tile_kind.cuh's map, made once a
// call by tile_kinds, a map a slice of the mask and the bias: a causal mask's diagonal tiles read neither). Head
// sizes up to D (64 or 128), zero-padded. The kernels live in namespace ONNXTRAIN_MMA_ATTENTION (attention_tiles.cuh)
// so that the tests' warp emulation compiles its own host copy. Every operand is read (and written) as rows that lie
// where its AttentionRows say (attention_rows.h): as the tensors are laid out, or sequence-major.
#pragma once
#include "kernels/cuda/attention_grad.cuh"
#include "kernels/cuda/attention_steps.cuh"

namespace onnxtrain::kernels::cuda::ONNXTRAIN_MMA_ATTENTION {

// What a block over 64 query rows (the forward's; grid: query tiles x pairs) starts from: its pair and first row,
// the warp's first row, the lane's g and t, the pair's K and V, the scalars.
template <typename T>
struct RowBlock {
  int64_t pair, block_r0, r0;
  int lane, g, t;
  AttentionPair<T> p;
  float scale, fill;
  const uint16_t *kb, *vb;
};
template <typename T>
__device__ __forceinline__ RowBlock<T> row_block(const Attention& a, const T* k, const T* v) {
  const int64_t tiles = (a.tq + kTile - 1) / kTile, pair = blockIdx.x / tiles, block_r0 = blockIdx.x % tiles * kTile;
  const int lane = threadIdx.x % 32;
  const AttentionPair<T> p = pair_of<T>(a, pair);
  return {pair, block_r0, block_r0 + threadIdx.x / 32 * 16, lane, lane / 4, lane % 4, p, scalar_or<T>(a.scale, 1.f),
          scalar_or<T>(a.fill, 0.f), bits(k) + a.k.at(p.kv), bits(v) + a.v.at(p.kv)};
}

// Runs step(slot, j0, kind) by the whole block for each tile of keys j0 .. j0 + 63 in order but those whose every
// score is -inf (the map: kind_of), K's rows (ks[slot][j][d]) and V's (vs[slot][j][d]) of the tile staged, and
// under dropout by whole blocks of the draw (blocked_rows), each of the block's rows' key of the draw for the tile's
// keys (keys[slot][row], a thread a row instead of each thread's rows' keys).
template <typename T, int D, bool kLean, typename Step>
__device__ __forceinline__ void for_live_tiles(const Attention& a, const RowBlock<T>& b,
                                               uint16_t (*ks)[kTile][D + 8], uint16_t (*vs)[kTile][D + 8],
                                               uint32_t (*keys)[kTile], Step&& step) {
  const int tiles = int((a.tk + kTile - 1) / kTile);
  LiveTiles map;
  auto live_from = [&](int n) {  // the first tile from tile n on not all -inf (none: one past the keys)
    const LiveTiles::At t = map.next(n, tiles, [&](int m) {
      return kind_of<kTile, kTile>(a, b.p.slice, b.block_r0, int64_t(m) * kTile);
    });
    return Live{int64_t(t.n) * kTile, t.kind};
  };
  auto stage_tile = [&](int slot, Live t) {
    if (t.at < a.tk) {
      stage<kTile, D>(ks[slot], b.kb, t.at, 0, a.tk, a.d, a.k.row);
      stage<kTile, D>(vs[slot], b.vb, t.at, 0, a.tk, a.dv, a.v.row);
      if (a.dropout && (kLean || blocked_rows(a)))
        for (int i = threadIdx.x; i < kTile; i += kBlock)
          keys[slot][i] = row_key(a, b.pair * a.tq + b.block_r0 + i, t.at);
    }
    commit_copies();
  };
  Live tile = live_from(0);
  stage_tile(0, tile);
  for (int n = 0; a.tk > tile.at; ++n) {  // (not "tile.at <": nvcc reads a template argument list)
    const int slot = n % kStages<D>;
    const Live following = step_ahead<kStages<D>>(n, live_from(int(tile.at / kTile) + 1), stage_tile);
    step(slot, tile.at, tile.kind);
    step_behind<kStages<D>>(following, stage_tile);
    tile = following;
  }
}

// Y and the LSE: grid (query tiles x pairs); a build each (attention_builds.cuh), the lean one's registers for heads
// of 64 bounded for 3 blocks a multiprocessor (168; 189 left to itself, for 2; a few spilled in its loop. Heads of 128
// spilled 400 bytes so).
template <typename T, int D, bool kLean>
__global__ void __launch_bounds__(kBlock, kLean && D <= 64 ? 3 : 1)
    forward(Attention a, const T* q, const T* k, const T* v, T* y, float* lse) {
  if (other_build<kLean>(a)) return;
  __shared__ __align__(16) uint16_t ks[kStages<D>][kTile][D + 8];  // the step's keys, a row each
  __shared__ __align__(16) uint16_t vs[kStages<D>][kTile][D + 8];  // and its values
  __shared__ uint32_t keys[kStages<D>][kTile];                     // and the rows' keys of dropout's draw
  const RowBlock<T> b = row_block(a, k, v);
  const int64_t pair = b.pair, r0 = b.r0;
  const int g = b.g, t = b.t;
  const AttentionPair<T> p = b.p;
  uint32_t qf[D / 16][4];
  a_global<D>(qf, bits(q) + a.q.at(pair), r0, a.tq, a.d, a.q.row, g, t);
  const float scale = b.scale, fill = b.fill;
  float o[D / 8][4] = {}, m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  for_live_tiles<T, D, kLean>(a, b, ks, vs, keys, [&](int slot, int64_t j0, TileKind kind) {
    float s[kTile / 8][4];
    product_rows<T, D, kTile, false>(s, qf, ks[slot], b.lane);  // S = Q K^T
    float top[2] = {-INFINITY, -INFINITY};
    // No score past the rows or the keys, none masked or biased: the products as they are, scaled in the exponent
    // (a positive scale keeps the largest the largest).
    const bool fast = inside(a, kind, r0 + 16, j0 + kTile) && scale > 0.f;
    if (fast) {
#pragma unroll
      for (int nt = 0; nt < kTile / 8; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) top[i / 2] = fmaxf(top[i / 2], s[nt][i]);
    } else {
      const Groups groups = groups_of(a, kind, p.slice, r0, j0);
      if (!kLean && groups.read()) {
#pragma unroll
        for (int nt = 0; nt < kTile / 8; ++nt)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const TileKind k = groups.of(nt);
            s[nt][i] = k == TileKind::kDead ? -INFINITY
                                            : score(a, p, s[nt][i], r0 + row_of(i, g), j0 + column_of(nt, i, t),
                                                    scale, fill, k == TileKind::kPlain);
          }
      } else {
        const int rows_in = left(a.tq, r0, 16), keys_in = left(a.tk, j0, kTile);
#pragma unroll
        for (int nt = 0; nt < kTile / 8; ++nt)
#pragma unroll
          for (int i = 0; i < 4; ++i)
            s[nt][i] = off_unread(groups.of(nt), row_of(i, g), column_of(nt, i, t), rows_in, keys_in)
                           ? -INFINITY
                           : s[nt][i] * scale;
      }
#pragma unroll
      for (int nt = 0; nt < kTile / 8; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) top[i / 2] = fmaxf(top[i / 2], s[nt][i]);
    }
    const float mult = fast ? scale : 1.f;  // what the scores still take
    float offset[2], alpha[2], sum[2] = {0.f, 0.f};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float mn = fmaxf(m[h], quad_max(top[h]) * mult);
      const float base = mn == -INFINITY ? 0.f : mn;  // every score so far -inf: nothing to add yet
      alpha[h] = __expf(m[h] - base);
      offset[h] = -base * kLog2e;
      m[h] = mn;
    }
    const float to_log2 = mult * kLog2e;  // P = 2^(s to_log2 + offset) = exp(s mult - base)
#pragma unroll
    for (int nt = 0; nt < kTile / 8; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) sum[i / 2] += s[nt][i] = exp2_approx(fmaf(s[nt][i], to_log2, offset[i / 2]));
    if (a.dropout)  // (the kept ones unscaled)
      drop_rows<kLean>(s, a, keys[slot] + (r0 - b.block_r0), pair * a.tq + r0, j0, g, t);
#pragma unroll
    for (int h = 0; h < 2; ++h) l[h] = l[h] * alpha[h] + quad_sum(sum[h]);
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) o[nt][i] *= alpha[i / 2];
    product_accumulators<T, D, kTile, true>(o, s, vs[slot], b.lane);  // O += P V
  });
  float inv[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const bool empty = l[h] == 0;  // a fully masked row: NaN as Softmax gives, or zeros
    inv[h] = empty ? (a.zero_masked_rows ? 0.f : NAN) : drop_scale(a) / l[h];  // (dropout's kept ones scaled here)
    const int64_t r = r0 + g + 8 * h;
    if (lse && t == 0 && r < a.tq)
      lse[pair * a.tq + r] = empty ? (a.zero_masked_rows ? INFINITY : NAN) : m[h] + logf(l[h]);
  }
  store_rows<T, D>(y + a.y.at(pair), o, r0, a.tq, a.dv, a.y.row, inv, g, t);
}

// Each row's D = rowsum(dY Y), in float32: a warp a row.
template <typename T>
__global__ void __launch_bounds__(kBlock) row_dots(Attention a, const T* dy, const T* y, float* dots) {
  const int64_t row = int64_t(blockIdx.x) * (kBlock / 32) + threadIdx.x / 32;
  if (row >= a.pairs * a.tq) return;
  const int64_t at = a.y.at(row / a.tq, row % a.tq);
  float s = 0.f;
  for (int64_t c = threadIdx.x % 32; c < a.dv; c += 32) s += to_float(dy[at + c]) * to_float(y[at + c]);
  s = warp_sum(s);
  if (threadIdx.x % 32 == 0) dots[row] = s;
}

}  // namespace onnxtrain::kernels::cuda::ONNXTRAIN_MMA_ATTENTION
