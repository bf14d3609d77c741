// The tensor-core FlashAttention's backward kernel (attention_mma.cuh has the scheme): a block owns 64 keys of a K
// and V batch index, a warp 16 of them, and steps over the query rows of every pair reading them (grouped-query heads
// summed there), kQueries rows a step staged in shared memory with their dY, log-sum-exps, D and dropout's row keys;
// S^T and dP^T recomputed in registers, dV += P^T dY and dK += dS^T Q accumulated there; dS then goes through shared
// memory for the step's dQ share, dS K, added to float32 sums by atomics (FlashAttention-2's), each warp a quarter of
// the columns (the launch zeroes the sums first and casts them into dQ after).
#pragma once
#include "kernels/cuda/attention_steps.cuh"

namespace onnxtrain::kernels::cuda::ONNXTRAIN_MMA_ATTENTION {

// The query rows grad stages a step: its registers hold dK and dV of 16 keys by D columns.
template <int D>
constexpr int kQueries = D > 64 ? 16 : 32;
static_assert(kQueries<64> <= 32 && kBlock >= 64, "a step's rows staged by a warp's lanes");

// Adds x and y to at[0] and at[1] (8-byte aligned): one 8-byte atomic on sm_90, two 4-byte ones before it.
__device__ __forceinline__ void add_pair(float* at, float x, float y) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float2*>(at), make_float2(x, y));
#else
  atomicAdd(at, x);
  atomicAdd(at + 1, y);
#endif
}

// The step's dQ share of a warp: dS (ds_t[key][row]: the step's rows by the block's keys, as A operands transposed)
// times K (its rows ks[key][d]) for the warp's quarter of the D columns, added to dq_sums (rows of a.d floats where
// a.sums says) of the step's rows q0 .. of pair `pair`.
template <typename T, int D, int Q>
__device__ __forceinline__ void add_dq(const Attention& a, const uint16_t (*ds_t)[Q + 8],
                                       const uint16_t (*ks)[D + 8], float* dq_sums, int64_t pair, int64_t q0,
                                       int warp, int lane) {
  constexpr int M = Q / 16, N = D / 32;  // the step's 16-row tiles, the warp's 8-column ones
  const int c0 = warp * (D / 4), g = lane / 4, t = lane % 4;
  float acc[M][N][4] = {};
#pragma unroll
  for (int kk = 0; kk < kTile / 16; ++kk) {
    uint32_t ar[M][4];
#pragma unroll
    for (int m = 0; m < M; ++m) a_tile<true>(ar[m], ds_t, 16 * m, 16 * kk, lane);
#pragma unroll
    for (int np = 0; np < N / 2; ++np) {
      uint32_t b[4];
      b_tiles<true>(b, ks, c0 + 16 * np, 16 * kk, lane);
#pragma unroll
      for (int m = 0; m < M; ++m) {
        mma<T>(acc[m][2 * np], ar[m], b[0], b[1]);
        mma<T>(acc[m][2 * np + 1], ar[m], b[2], b[3]);
      }
    }
  }
  // The step's rows from its first one's sums on: 32-bit offsets (rows < Q lie ld floats apart; the launch checks
  // that Q of them fit). Where the step's rows are all inside and hold D columns (every step at GPT-2's shape), the
  // lane's offsets from its first are its rows' alone; else the columns past d and the rows past tq (the last step's)
  // are left out.
  float* const rows = dq_sums + a.sums.at(pair, q0);
  const int d = int(a.d), rows_in = left(a.tq, q0, Q), ld = int(a.sums.row);
  if (d == D && rows_in == Q) {
    float* const lane_at = rows + (g * ld + c0 + 2 * t);
#pragma unroll
    for (int m = 0; m < M; ++m)
#pragma unroll
      for (int nt = 0; nt < N; ++nt)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          add_pair(lane_at + ((16 * m + 8 * h) * ld + 8 * nt), acc[m][nt][2 * h], acc[m][nt][2 * h + 1]);
    return;
  }
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int nt = 0; nt < N; ++nt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = 16 * m + g + 8 * h, c = c0 + 8 * nt + 2 * t;
        if (r >= rows_in) continue;
        float* at = rows + (r * ld + c);
        if (c + 1 < d && d % 2 == 0 && ld % 2 == 0) {
          add_pair(at, acc[m][nt][2 * h], acc[m][nt][2 * h + 1]);
          continue;
        }
        if (c < d) atomicAdd(at, acc[m][nt][2 * h]);
        if (c + 1 < d) atomicAdd(at + 1, acc[m][nt][2 * h + 1]);
      }
}

// dK and dV, and dQ's float32 sums: grid (key tiles x K's batch), each block summing over the pairs that read its K
// and V; a build each (attention_builds.cuh). (At least 2 blocks a multiprocessor: left to itself, ptxas gave heads
// of 64 168 registers, for 3, and spilled in the loop.)
template <typename T, int D, bool kLean>
__global__ void __launch_bounds__(kBlock, 2) grad(Attention a, const T* dy, const T* q, const T* k, const T* v,
                                                   const float* lse, const float* dots, float* dq_sums, T* dk, T* dv) {
  if (other_build<kLean>(a)) return;
  constexpr int Q = kQueries<D>;
  __shared__ __align__(16) uint16_t ks[kTile][D + 8];  // the block's keys, a row each
  __shared__ __align__(16) uint16_t vs[kTile][D + 8];  // and its values
  constexpr int S = kStages<D>;
  __shared__ __align__(16) uint16_t qs[S][Q][D + 8], ys[S][Q][D + 8];  // the step's query rows and their dY
  __shared__ float lrs[S][Q], drs[S][Q];  // and their LSE (times log2 e: base 2) and D
  __shared__ uint32_t keys[S][Q];          // and, under dropout, their rows' block keys of the draw for these keys
  __shared__ __align__(16) uint16_t ds_t[kTile][Q + 8];  // the step's dS^T: the block's keys by the step's rows
  const int64_t tiles = (a.tk + kTile - 1) / kTile, kv = blockIdx.x / tiles, k0 = blockIdx.x % tiles * kTile;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4, w0 = warp * 16;
  stage<kTile, D>(ks, bits(k) + a.k.at(kv), k0, 0, a.tk, a.d, a.k.row);
  stage<kTile, D>(vs, bits(v) + a.v.at(kv), k0, 0, a.tk, a.dv, a.v.row);
  commit_copies();  // (waited for with the first step's rows)
  // P's kept ones and dP's unscaled: drop_scale goes into dV once at the end, into dS's factor ds_scale (dS = P (dP
  // keep_scale - D) scale = P (dP - D / keep_scale) ds_scale), D staged times keep_ratio
  const float scale = scalar_or<T>(a.scale, 1.f), fill = scalar_or<T>(a.fill, 0.f), ds_scale = scale * drop_scale(a);
  const float keep_ratio = 1.f / drop_scale(a);
  const bool blocked = kLean || blocked_rows(a);
  float dka[D / 8][4] = {}, dva[D / 8][4] = {};
  struct Rows {  // a step: Q query rows from q0 of a pair that reads this block's K and V
    KvPairs pairs;  // (pairs.pair: the pair)
    int64_t q0;
    AttentionPair<T> p;
    TileKind kind;
    LiveTiles tiles;  // the pair's tiles of Q rows
  };
  const int row_tiles = int((a.tq + Q - 1) / Q);
  auto next = [&](Rows r) {  // the step after r whose scores are not all -inf (pair past the last: none)
    for (int n = int(r.q0 / Q) + 1;;) {
      if (n >= row_tiles) {
        if (r.pairs.next(a) >= a.pairs) return r;
        r.p = pair_of<T>(a, r.pairs.pair), r.tiles = LiveTiles{}, n = 0;
      }
      const LiveTiles::At t = r.tiles.next(n, row_tiles, [&](int m) {
        return kind_of<Q, kTile>(a, r.p.slice, int64_t(m) * Q, k0);
      });
      r.q0 = int64_t(t.n) * Q, r.kind = t.kind, n = t.n;
      if (r.kind != TileKind::kDead) return r;
    }
  };
  auto stage_rows = [&](int slot, Rows r) {
    if (r.pairs.pair < a.pairs) {
      stage<Q, D>(qs[slot], bits(q) + a.q.at(r.pairs.pair), r.q0, 0, a.tq, a.d, a.q.row);
      stage<Q, D>(ys[slot], bits(dy) + a.y.at(r.pairs.pair), r.q0, 0, a.tq, a.dv, a.y.row);
      // (the rows' LSE and D by the first warp, their keys of the draw by the second: a lane a row)
      const int64_t row0 = r.pairs.pair * a.tq + r.q0;
      const int i = lane;
      if (threadIdx.x < Q) {
        const bool in = r.q0 + i < a.tq;
        lrs[slot][i] = in ? lse[row0 + i] * kLog2e : INFINITY;  // (in base 2)
        drs[slot][i] = in ? dots[row0 + i] * keep_ratio : 0.f;
      } else if (a.dropout && blocked && warp == 1 && i < Q) {
        keys[slot][i] = row_key(a, row0 + i, k0);
      }
    }
    commit_copies();
  };
  Rows step = next(Rows{KvPairs{kv}, a.tq, AttentionPair<T>{}, TileKind::kDead, LiveTiles{}});
  stage_rows(0, step);
  for (int n = 0; step.pairs.pair < a.pairs; ++n) {
    const int slot = n % S;
    const Rows following = step_ahead<S>(n, next(step), stage_rows);
    const int64_t pair = step.pairs.pair, q0 = step.q0;
    const AttentionPair<T> p = step.p;
    // The warp's 16 keys by each 16 of the step's rows: the step's kind where it is not mixed, else each one's from
    // the map (a causal mask's diagonal: some dead, their scores left out, some plain).
    TileKind sub[Q / kKindRows];
    bool live = false, plain = true, read = false;
#pragma unroll
    for (int h = 0; h < Q / kKindRows; ++h) {
      sub[h] = step.kind == TileKind::kMixed ? kind_of<kKindRows, kKindKeys>(a, p.slice, q0 + kKindRows * h, k0 + w0)
                                             : step.kind;
      live |= sub[h] != TileKind::kDead;
      plain &= sub[h] == TileKind::kPlain;
      read |= sub[h] == TileKind::kMixed;
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
        a_tile<false>(ka, ks, w0, 16 * kk, lane);
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
      // key staged), dP^T through it (dropped ones 0), and P where kept.
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
#pragma unroll
        for (int nt = 0; nt < Q / 8; ++nt)
#pragma unroll
          for (int i = 0; i < 4; ++i)
            if (!kept_bit(kept, nt, i)) dpt[nt][i] = 0.f;
      }
      if (inside(a, plain ? TileKind::kPlain : TileKind::kMixed, q0 + Q, k0 + w0 + 16)) {
        const float to_log2 = scale * kLog2e;
#pragma unroll
        for (int nt = 0; nt < Q / 8; ++nt)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int rl = column_of(nt, i, t);
            const float e = exp2_approx(fmaf(st[nt][i], to_log2, -lr[rl]));
            st[nt][i] = kept_bit(kept, nt, i) ? e : 0.f;
            dpt[nt][i] = e * (dpt[nt][i] - dr[rl]) * ds_scale;
          }
      } else if (kLean || !read) {  // groups dead, plain or causal (a key past its query in its group: -inf), bounds
        const int rows_in = left(a.tq, q0, Q), keys_in = left(a.tk, k0 + w0, 16);
        const float to_log2 = scale * kLog2e;
#pragma unroll
        for (int nt = 0; nt < Q / 8; ++nt)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int rl = column_of(nt, i, t);
            const bool off = off_unread(sub[nt * 8 / kKindRows], rl, row_of(i, g), rows_in, keys_in);
            const float e = off ? 0.f : exp2_approx(fmaf(st[nt][i], to_log2, -lr[rl]));
            st[nt][i] = kept_bit(kept, nt, i) ? e : 0.f;
            dpt[nt][i] = off ? 0.f : e * (dpt[nt][i] - dr[rl]) * ds_scale;
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
            pd = kept_bit(kept, nt, i) ? e : 0.f;
            if (!off) ds = e * (dpt[nt][i] - dr[rl]) * ds_scale;
          }
          st[nt][i] = pd;
          dpt[nt][i] = ds;
        }
    }
    product_accumulators<T, D, Q, true>(dva, st, ys[slot], lane);  // dV += P^T dY
    product_accumulators<T, D, Q, true>(dka, dpt, qs[slot], lane);  // dK += dS^T Q
    accumulators_to_shared<T, Q>(ds_t, dpt, w0, g, t);  // (rounded as dK's product takes it)
    } else {
      const float none[Q / 8][4] = {};
      accumulators_to_shared<T, Q>(ds_t, none, w0, g, t);
    }
    __syncthreads();  // every warp's dS^T stored, and its step's rows read: with one slot, the following's copied now
    if constexpr (S == 1) stage_rows(0, following);
    add_dq<T, D, Q>(a, ds_t, ks, dq_sums, pair, q0, warp, lane);
    step = following;
  }
#pragma unroll
  for (int nt = 0; nt < D / 8; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t j = k0 + w0 + row_of(i, g);
      const int c = column_of(nt, i, t);
      if (j >= a.tk) continue;
      if (c < a.d) dk[a.k.at(kv, j) + c] = from_float<T>(dka[nt][i]);
      if (c < a.dv) dv[a.v.at(kv, j) + c] = from_float<T>(dva[nt][i] * drop_scale(a));
    }
}

}  // namespace onnxtrain::kernels::cuda::ONNXTRAIN_MMA_ATTENTION
