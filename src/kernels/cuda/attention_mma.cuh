// FlashAttention on tensor cores for 16-bit operands, FlashAttention-2's scheme (warp_mma.cuh's products): a block
// of 4 warps owns 64 query rows (16 a warp) and steps over the keys 64 at a time, K^T's and V's rows staged in
// shared memory as they lie in global memory (by cp.async; where two stages fit, the next step's copied while the
// warps work on this one's) and read as operands by ldmatrix; scores, probabilities and the output stay in
// registers, rescaled by the online softmax, the probabilities fed to the next product as they are. The backward
// recomputes each probability from the row's log-sum-exp in two kernels, no atomics: one owns query rows (dQ), the
// other 64 keys of a K and V batch index (dK, dV) and steps over the query rows of every pair reading them
// (grouped-query heads summed there). Masks, biases, the fill of masked scores, dropout (the CPU's counter-based
// draw, a block key a row of 64 keys) and fully masked rows as the warp-per-row kernels (attention.cu) and the
// CPU's; tiles whose every score is -inf (a causal mask's upper ones) skipped, and the mask and the bias read per
// score only in tiles they change (a causal mask's diagonal: attention_tile_kind.cuh's map, made once a call by
// tile_kinds, a map a slice of the mask and the bias). Head sizes up to D (64 or 128), zero-padded. The kernels live
// in namespace ONNXTRAIN_MMA_ATTENTION (attention_tiles.cuh) so that the tests' warp emulation compiles its own host
// copy.
#pragma once
#include "kernels/cuda/attention_steps.cuh"

namespace onnxtrain::kernels::cuda::ONNXTRAIN_MMA_ATTENTION {

// What a block over 64 query rows (forward, grad_q; grid: query tiles x pairs) starts from: its pair and first row,
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
__device__ __forceinline__ RowBlock<T> row_block(const Attention& a, const T* kt, const T* v) {
  const int64_t tiles = (a.tq + kTile - 1) / kTile, pair = blockIdx.x / tiles, block_r0 = blockIdx.x % tiles * kTile;
  const int lane = threadIdx.x % 32;
  const AttentionPair<T> p = pair_of<T>(a, pair);
  return {pair, block_r0, block_r0 + threadIdx.x / 32 * 16, lane, lane / 4, lane % 4, p, scalar_or<T>(a.scale, 1.f),
          scalar_or<T>(a.fill, 0.f), bits(kt) + p.kv * a.d * a.tk, bits(v) + p.kv * a.tk * a.dv};
}

// Runs step(slot, j0, kind) by the whole block for each tile of keys j0 .. j0 + 63 in order but those whose every
// score is -inf (the map: kind_of), K^T's rows (kts[slot][d][j]) and V's (vs[slot][j][d]) of the tile staged.
template <typename T, int D, typename Step>
__device__ __forceinline__ void for_live_tiles(const Attention& a, const RowBlock<T>& b,
                                               uint16_t (*kts)[D][kTile + 8], uint16_t (*vs)[kTile][D + 8],
                                               Step&& step) {
  struct Tile {
    int64_t j0;
    TileKind kind;
  };
  auto live_from = [&](int64_t j0) {  // the first tile from j0 on not all -inf (j0 past the keys: none)
    Tile t{j0, TileKind::kDead};
    for (; t.j0 < a.tk; t.j0 += kTile)
      if ((t.kind = kind_of<kTile, kTile>(a, b.p.slice, b.block_r0, t.j0)) != TileKind::kDead) break;
    return t;
  };
  auto stage_tile = [&](int slot, Tile t) {
    if (t.j0 < a.tk) {
      stage<D, kTile>(kts[slot], b.kb, 0, t.j0, a.d, a.tk);
      stage<kTile, D>(vs[slot], b.vb, t.j0, 0, a.tk, a.dv);
    }
    commit_copies();
  };
  Tile tile = live_from(0);
  stage_tile(0, tile);
  for (int n = 0; a.tk > tile.j0; ++n) {  // (not "tile.j0 <": a member of a dependent type)
    const int slot = n % kStages<D>;
    const Tile following = step_ahead<kStages<D>>(n, live_from(tile.j0 + kTile), stage_tile);
    step(slot, tile.j0, tile.kind);
    step_behind<kStages<D>>(following, stage_tile);
    tile = following;
  }
}

// Y and the LSE: grid (query tiles x pairs).
template <typename T, int D>
__global__ void __launch_bounds__(kBlock) forward(Attention a, const T* q, const T* kt, const T* v, T* y, float* lse) {
  __shared__ __align__(16) uint16_t kts[kStages<D>][D][kTile + 8];  // the step's keys as K^T's rows
  __shared__ __align__(16) uint16_t vs[kStages<D>][kTile][D + 8];   // and its values, a row each
  const RowBlock<T> b = row_block(a, kt, v);
  const int64_t pair = b.pair, r0 = b.r0;
  const int g = b.g, t = b.t;
  const AttentionPair<T> p = b.p;
  uint32_t qf[D / 16][4];
  a_global<D>(qf, bits(q) + pair * a.tq * a.d, r0, a.tq, a.d, g, t);
  const float scale = b.scale, fill = b.fill;
  float o[D / 8][4] = {}, m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  for_live_tiles<T, D>(a, b, kts, vs, [&](int slot, int64_t j0, TileKind kind) {
    float s[kTile / 8][4];
    product_rows<T, D, kTile, true>(s, qf, kts[slot], b.lane);  // S = Q K^T
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
#pragma unroll
      for (int nt = 0; nt < kTile / 8; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const TileKind k = groups.of(nt);
          s[nt][i] = k == TileKind::kDead ? -INFINITY
                                          : score(a, p, s[nt][i], r0 + row_of(i, g), j0 + column_of(nt, i, t), scale,
                                                  fill, k == TileKind::kPlain);
          top[i / 2] = fmaxf(top[i / 2], s[nt][i]);
        }
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
    if (a.dropout) drop(s, row_keeps(a, pair * a.tq + r0, j0, g, t), a.keep_scale);
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
    inv[h] = empty ? (a.zero_masked_rows ? 0.f : NAN) : 1.f / l[h];
    const int64_t r = r0 + g + 8 * h;
    if (lse && t == 0 && r < a.tq)
      lse[pair * a.tq + r] = empty ? (a.zero_masked_rows ? INFINITY : NAN) : m[h] + logf(l[h]);
  }
  store_rows<T, D>(y + pair * a.tq * a.dv, o, r0, a.tq, a.dv, inv, g, t);
}

// Each row's D = rowsum(dY Y), in float32: a warp a row.
template <typename T>
__global__ void __launch_bounds__(kBlock) row_dots(Attention a, const T* dy, const T* y, float* dots) {
  const int64_t row = int64_t(blockIdx.x) * (kBlock / 32) + threadIdx.x / 32;
  if (row >= a.pairs * a.tq) return;
  float s = 0.f;
  for (int64_t c = threadIdx.x % 32; c < a.dv; c += 32) s += to_float(dy[row * a.dv + c]) * to_float(y[row * a.dv + c]);
  s = warp_sum(s);
  if (threadIdx.x % 32 == 0) dots[row] = s;
}

// dQ: grid as the forward's.
template <typename T, int D>
__global__ void __launch_bounds__(kBlock) grad_q(Attention a, const T* dy, const T* q, const T* kt, const T* v,
                                                  const float* lse, const float* dots, T* dq) {
  __shared__ __align__(16) uint16_t kts[kStages<D>][D][kTile + 8];  // the step's keys as K^T's rows
  __shared__ __align__(16) uint16_t vs[kStages<D>][kTile][D + 8];   // and its values, a row each
  const RowBlock<T> b = row_block(a, kt, v);
  const int64_t pair = b.pair, r0 = b.r0;
  const int g = b.g, t = b.t;
  const AttentionPair<T> p = b.p;
  uint32_t qf[D / 16][4], yf[D / 16][4];
  a_global<D>(qf, bits(q) + pair * a.tq * a.d, r0, a.tq, a.d, g, t);
  a_global<D>(yf, bits(dy) + pair * a.tq * a.dv, r0, a.tq, a.dv, g, t);
  const float scale = b.scale;
  float lr[2], dr[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t r = r0 + g + 8 * h;
    lr[h] = r < a.tq ? lse[pair * a.tq + r] : INFINITY;
    dr[h] = r < a.tq ? dots[pair * a.tq + r] : 0.f;
  }
  float acc[D / 8][4] = {};
  for_live_tiles<T, D>(a, b, kts, vs, [&](int slot, int64_t j0, TileKind kind) {
    float s[kTile / 8][4], dp[kTile / 8][4];
    product_rows<T, D, kTile, true>(s, qf, kts[slot], b.lane);   // S = Q K^T
    product_rows<T, D, kTile, false>(dp, yf, vs[slot], b.lane);  // dP = dY V^T
    if (a.dropout) drop(dp, row_keeps(a, pair * a.tq + r0, j0, g, t), a.keep_scale);  // dP through dropout
    if (inside(a, kind, r0 + 16, j0 + kTile)) {  // (as the forward's: P = 2^(s scale log2 e - ...))
      const float to_log2 = scale * kLog2e, offset[2] = {-lr[0] * kLog2e, -lr[1] * kLog2e};
#pragma unroll
      for (int nt = 0; nt < kTile / 8; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i)
          s[nt][i] = exp2_approx(fmaf(s[nt][i], to_log2, offset[i / 2])) * (dp[nt][i] - dr[i / 2]) * scale;
    } else {
      const Groups groups = groups_of(a, kind, p.slice, r0, j0);
#pragma unroll
      for (int nt = 0; nt < kTile / 8; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int64_t r = r0 + row_of(i, g), j = j0 + column_of(nt, i, t);
          const TileKind k = groups.of(nt);
          const bool plain = k == TileKind::kPlain;
          float ds = 0.f;  // (a masked score's fill is a constant: no gradient through it)
          if (k != TileKind::kDead && r < a.tq && j < a.tk && (plain || !masked(a, p.cond, r, j))) {
            const float e = __expf(s[nt][i] * scale + (plain ? 0.f : bias_at(a, p.bias, r, j)) - lr[i / 2]);
            ds = e * (dp[nt][i] - dr[i / 2]) * scale;
          }
          s[nt][i] = ds;
        }
    }
    product_accumulators<T, D, kTile, false>(acc, s, kts[slot], b.lane);  // dQ += dS K
  });
  store_rows<T, D>(dq + pair * a.tq * a.d, acc, r0, a.tq, a.d, {1.f, 1.f}, g, t);
}

// The query rows grad_kv stages a step: its registers hold dK and dV of 16 keys by D columns.
template <int D>
constexpr int kQueries = D > 64 ? 16 : 32;

// dKt and dV: grid (key tiles x K's batch), each block summing over the pairs that read its K and V. (At least 2
// blocks a multiprocessor: left to itself, ptxas gave heads of 64 168 registers, for 3, and spilled in the loop.)
template <typename T, int D>
__global__ void __launch_bounds__(kBlock, 2) grad_kv(Attention a, const T* dy, const T* q, const T* kt, const T* v,
                                                      const float* lse, const float* dots, T* dkt, T* dv) {
  constexpr int Q = kQueries<D>;
  __shared__ __align__(16) uint16_t kts[D][kTile + 8];  // the block's keys as K^T's rows
  __shared__ __align__(16) uint16_t vs[kTile][D + 8];   // and its values, a row each
  constexpr int S = kStages<D>;
  __shared__ __align__(16) uint16_t qs[S][Q][D + 8], ys[S][Q][D + 8];  // the step's query rows and their dY
  __shared__ float lrs[S][Q], drs[S][Q];  // and their LSE (times log2 e: base 2) and D
  __shared__ uint32_t keys[S][Q];          // and, under dropout, their rows' block keys of the draw for these keys
  const int64_t tiles = (a.tk + kTile - 1) / kTile, kv = blockIdx.x / tiles, k0 = blockIdx.x % tiles * kTile;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4, w0 = warp * 16;
  stage<D, kTile>(kts, bits(kt) + kv * a.d * a.tk, 0, k0, a.d, a.tk);
  stage<kTile, D>(vs, bits(v) + kv * a.tk * a.dv, k0, 0, a.tk, a.dv);
  commit_copies();  // (waited for with the first step's rows)
  const float scale = scalar_or<T>(a.scale, 1.f), fill = scalar_or<T>(a.fill, 0.f);
  const bool blocked = blocked_rows(a);
  float dk[D / 8][4] = {}, dva[D / 8][4] = {};
  struct Rows {  // a step: Q query rows from q0 of a pair that reads this block's K and V
    int64_t pair, q0;
    AttentionPair<T> p;
    TileKind kind;
  };
  auto next = [&](Rows r) {  // the step after r whose scores are not all -inf (pair past the last: none)
    for (;;) {
      if ((r.q0 += Q) >= a.tq) {
        do ++r.pair;
        while (r.pair < a.pairs && slice_and_kv(a, r.pair).at[1] != kv);
        if (r.pair >= a.pairs) return r;
        r.p = pair_of<T>(a, r.pair), r.q0 = 0;
      }
      if ((r.kind = kind_of<Q, kTile>(a, r.p.slice, r.q0, k0)) != TileKind::kDead) return r;
    }
  };
  auto stage_rows = [&](int slot, Rows r) {
    if (r.pair < a.pairs) {
      stage<Q, D>(qs[slot], bits(q) + r.pair * a.tq * a.d, r.q0, 0, a.tq, a.d);
      stage<Q, D>(ys[slot], bits(dy) + r.pair * a.tq * a.dv, r.q0, 0, a.tq, a.dv);
      for (int i = threadIdx.x; i < Q; i += kBlock) {
        const bool in = r.q0 + i < a.tq;
        lrs[slot][i] = in ? lse[r.pair * a.tq + r.q0 + i] * kLog2e : INFINITY;  // (in base 2)
        drs[slot][i] = in ? dots[r.pair * a.tq + r.q0 + i] : 0.f;
        if (a.dropout && blocked) keys[slot][i] = row_key(a, r.pair * a.tq + r.q0 + i, k0);
      }
    }
    commit_copies();
  };
  Rows step = next(Rows{-1, a.tq, AttentionPair<T>{}, TileKind::kDead});
  stage_rows(0, step);
  for (int n = 0; step.pair < a.pairs; ++n) {
    const int slot = n % S;
    const Rows following = step_ahead<S>(n, next(step), stage_rows);
    const int64_t pair = step.pair, q0 = step.q0;
    const AttentionPair<T> p = step.p;
    // The warp's 16 keys by each 16 of the step's rows: the step's kind where it is not mixed, else each one's from
    // the map (a causal mask's diagonal: some dead, their scores left out, some plain).
    TileKind sub[Q / kKindRows];
    bool live = false, plain = true;
#pragma unroll
    for (int h = 0; h < Q / kKindRows; ++h) {
      sub[h] = step.kind == TileKind::kMixed ? kind_of<kKindRows, kKindKeys>(a, p.slice, q0 + kKindRows * h, k0 + w0)
                                             : step.kind;
      live |= sub[h] != TileKind::kDead;
      plain &= sub[h] == TileKind::kPlain;
    }
    const float *lr = lrs[slot], *dr = drs[slot];
    const uint32_t* key = keys[slot];
    if (live) {  // (else nothing of the warp's adds to dK or dV)
    float st[Q / 8][4], dpt[Q / 8][4];  // S^T = K Q^T and dP^T = V dY^T: the warp's keys by the step's rows
#pragma unroll
    for (int nt = 0; nt < Q / 8; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) st[nt][i] = dpt[nt][i] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t ka[4], va[4];
      a_tile<true>(ka, kts, w0, 16 * kk, lane);  // K's rows from K^T's
      a_tile<false>(va, vs, w0, 16 * kk, lane);
#pragma unroll
      for (int np = 0; np < Q / 16; ++np) {
        uint32_t bq[4], by[4];
        b_tiles<false>(bq, qs[slot], 16 * np, 16 * kk, lane);
        b_tiles<false>(by, ys[slot], 16 * np, 16 * kk, lane);
        mma<T>(st[2 * np], ka, bq[0], bq[1]);
        mma<T>(st[2 * np + 1], ka, bq[2], bq[3]);
        mma<T>(dpt[2 * np], va, by[0], by[1]);
        mma<T>(dpt[2 * np + 1], va, by[2], by[3]);
      }
    }
    // Dropout's keep bits (bit 4 nt + i; a draw for both of a row's keys where rows are whole blocks of it, the row's
    // key staged), dP^T through it (kept ones scaled, dropped ones 0), and P's factor where kept.
    uint32_t kept = ~0u;
    if (a.dropout) {
      kept = 0;
      if (blocked) {
#pragma unroll
        for (int nt = 0; nt < Q / 8; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const uint32_t d = dropout_draw(key[column_of(nt, e, t)], uint32_t(w0 + g));
            kept |= uint32_t(dropout_half_keeps(d, false, a.threshold)) << (4 * nt + e);
            kept |= uint32_t(dropout_half_keeps(d, true, a.threshold)) << (4 * nt + 2 + e);
          }
      } else {
#pragma unroll
        for (int nt = 0; nt < Q / 8; ++nt)
#pragma unroll
          for (int i = 0; i < 4; ++i)
            kept |= uint32_t(keeps(a, pair * a.tq + q0 + column_of(nt, i, t), k0 + w0 + row_of(i, g)))
                    << (4 * nt + i);
      }
      drop(dpt, kept, a.keep_scale);
    }
    const float ks = a.dropout ? a.keep_scale : 1.f;
    if (inside(a, plain ? TileKind::kPlain : TileKind::kMixed, q0 + Q, k0 + w0 + 16)) {
      const float to_log2 = scale * kLog2e;
#pragma unroll
      for (int nt = 0; nt < Q / 8; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int rl = column_of(nt, i, t);
          const float e = exp2_approx(fmaf(st[nt][i], to_log2, -lr[rl]));
          st[nt][i] = kept_bit(kept, nt, i) ? e * ks : 0.f;
          dpt[nt][i] = e * (dpt[nt][i] - dr[rl]) * scale;
        }
    } else {
#pragma unroll
      for (int nt = 0; nt < Q / 8; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int rl = column_of(nt, i, t);
          const int64_t j = k0 + w0 + row_of(i, g), r = q0 + rl;
          const TileKind k = sub[nt * 8 / kKindRows];
          const bool plain_here = k == TileKind::kPlain;
          float pd = 0.f, ds = 0.f;
          if (k != TileKind::kDead && j < a.tk && r < a.tq) {
            const bool off = !plain_here && masked(a, p.cond, r, j);
            const float x = off ? fill : st[nt][i] * scale + (plain_here ? 0.f : bias_at(a, p.bias, r, j));
            const float e = exp2_approx(fmaf(x, kLog2e, -lr[rl]));
            pd = kept_bit(kept, nt, i) ? e * ks : 0.f;
            if (!off) ds = e * (dpt[nt][i] - dr[rl]) * scale;
          }
          st[nt][i] = pd;
          dpt[nt][i] = ds;
        }
    }
    product_accumulators<T, D, Q, true>(dva, st, ys[slot], lane);  // dV += P^T dY
    product_accumulators<T, D, Q, true>(dk, dpt, qs[slot], lane);   // dK += dS^T Q
    }
    step_behind<S>(following, stage_rows);
    step = following;
  }
#pragma unroll
  for (int nt = 0; nt < D / 8; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t j = k0 + w0 + row_of(i, g);
      const int c = column_of(nt, i, t);
      if (j >= a.tk) continue;
      if (c < a.d) dkt[(kv * a.d + c) * a.tk + j] = from_float<T>(dk[nt][i]);
      if (c < a.dv) dv[(kv * a.tk + j) * a.dv + c] = from_float<T>(dva[nt][i]);
    }
}

}  // namespace onnxtrain::kernels::cuda::ONNXTRAIN_MMA_ATTENTION
