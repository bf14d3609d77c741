// FlashAttention for float32 operands with heads of up to 64 elements, FlashAttention-2's scheme on the float32
// units (no tensor cores: float32 products, as PyTorch's attention in float32 computes them, not TF32's). The
// forward's block of 4 warps owns 64 query rows (16 a warp) and steps over the keys 32 at a time, Q's rows, and each
// step's K's and V's, staged in shared memory; a lane holds 4 rows by 4 keys of a warp's scores (keys 8 apart, so
// that the 8 lanes of a row group read 8 consecutive staged rows: no bank conflict) and the same 4 rows by 8 columns
// of the output, rescaled by the online softmax, the probabilities passed through the warp's shared memory. The
// backward's block owns 32 keys of a K and V batch index (dK and dV in registers) and steps over 32 query rows at a
// time of every pair reading them, recomputing each probability from its row's log-sum-exp, adding each step's share
// of dQ to float32 sums by atomics. Masks, the bias, the fill, dropout (the CPU's counter-based draw) and fully masked
// rows as the other kernels; tiles whose every score is -inf skipped, and the mask and the bias read per score only
// in the 16 x 16 tiles of the map that they change irregularly (attention_tile_kind.cuh). Heads zero-padded to 64.
#pragma once
#include "kernels/cuda/attention_steps.cuh"

namespace onnxtrain::kernels::cuda::ONNXTRAIN_MMA_ATTENTION {

constexpr int kF32Head = 64;           // a head's elements, zero-padded
constexpr int kF32Keys = 32;           // the forward's keys a step; the backward's keys a block and rows a step
constexpr int kF32Row = kF32Head + 4;  // a staged row's floats: 16-byte aligned, consecutive rows 4 banks apart

// Rows r0 .. r0 + R - 1 of a (rows, cols) float32 matrix whose rows lie ld apart into s[r][c] for c < kF32Head,
// zeros outside it: 16 bytes a read where the rows allow (cols and ld multiples of 4, m 16-byte aligned), else an
// element at a time; consecutive threads take consecutive elements of a row.
template <int R>
__device__ __forceinline__ void stage_f32(float (*s)[kF32Row], const float* m, int64_t r0, int64_t rows, int64_t cols,
                                          int64_t ld) {
  if (cols % 4 == 0 && ld % 4 == 0 && reinterpret_cast<uintptr_t>(m) % 16 == 0) {
    for (int i = int(threadIdx.x); i < R * kF32Head / 4; i += kBlock) {
      const int r = i / (kF32Head / 4), c = i % (kF32Head / 4) * 4;
      const bool in = r0 + r < rows && c < cols;
      *reinterpret_cast<float4*>(&s[r][c]) =
          in ? *reinterpret_cast<const float4*>(m + (r0 + r) * ld + c) : float4{0.f, 0.f, 0.f, 0.f};
    }
    return;
  }
  for (int i = int(threadIdx.x); i < R * kF32Head; i += kBlock) {
    const int r = i / kF32Head, c = i % kF32Head;
    s[r][c] = r0 + r < rows && c < cols ? m[(r0 + r) * ld + c] : 0.f;
  }
}

__device__ __forceinline__ float4 row4(const float (*s)[kF32Row], int r, int c) {
  return *reinterpret_cast<const float4*>(&s[r][c]);
}
__device__ __forceinline__ float dot4(float4 a, float4 b, float acc) {
  return fmaf(a.w, b.w, fmaf(a.z, b.z, fmaf(a.y, b.y, fmaf(a.x, b.x, acc))));
}
// x[0..7] += p times the 8 columns c and c + 32 of a lane (u: columns c .. c + 3, w: c + 32 .. c + 35).
__device__ __forceinline__ void add_scaled(float (&x)[8], float p, float4 u, float4 w) {
  x[0] = fmaf(p, u.x, x[0]), x[1] = fmaf(p, u.y, x[1]), x[2] = fmaf(p, u.z, x[2]), x[3] = fmaf(p, u.w, x[3]);
  x[4] = fmaf(p, w.x, x[4]), x[5] = fmaf(p, w.y, x[5]), x[6] = fmaf(p, w.z, x[6]), x[7] = fmaf(p, w.w, x[7]);
}
// Column e (0 .. 7) of a lane whose first is c: c + e, then c + 28 + e.
__device__ __forceinline__ int column8(int c, int e) { return c + e + (e < 4 ? 0 : 28); }

// Score (r, j) from its product qk where its 16 x 16 tile of the map is of kind k: -inf in a dead tile or above a
// causal one's diagonal, else the tensor-core kernels' score() (a plain or causal tile reading neither mask nor bias).
__device__ __forceinline__ float f32_score(const Attention& a, const AttentionPair<float>& p, TileKind k, float qk,
                                           int64_t r, int64_t j, float scale, float fill) {
  if (k == TileKind::kDead || (k == TileKind::kCausal && j % kKindKeys > r % kKindRows)) return -INFINITY;
  return score(a, p, qk, r, j, scale, fill, k != TileKind::kMixed);
}
// The kind of the 16 x 16 tile of the map holding rows r0 .. r0 + 15 and keys j0 .. j0 + 15 inside a step's tile of
// kind `whole`: the step's where it is not mixed.
__device__ __forceinline__ TileKind f32_group(const Attention& a, int64_t slice, TileKind whole, int64_t r0,
                                              int64_t j0) {
  return whole == TileKind::kMixed ? kind_of<kKindRows, kKindKeys>(a, slice, r0, j0) : whole;
}
// Whether dropout keeps score (row, j) of a step whose keys lie in the block of the draw from j64 (a multiple of 64)
// on: where rows are whole blocks of the draw, from the row's block key (key), else by a draw of its own.
__device__ __forceinline__ bool f32_keeps(const Attention& a, uint32_t key, int64_t row, int64_t j, int64_t j64) {
  return blocked_rows(a) ? dropout_keeps_at(key, uint32_t(j - j64), a.threshold) : keeps(a, row, j);
}

// Y and the LSE: grid (query tiles of 64 x pairs), kBlock threads.
__global__ void __launch_bounds__(kBlock) forward_f32(Attention a, const float* q, const float* k, const float* v,
                                                      float* y, float* lse) {
  __shared__ __align__(16) float qs[kTile][kF32Row];
  __shared__ __align__(16) float ks[kF32Keys][kF32Row];
  __shared__ __align__(16) float vs[kF32Keys][kF32Row];
  __shared__ float ps[kBlock / 32][16][kF32Keys + 1];  // a warp's probabilities
  const int64_t tiles = (a.tq + kTile - 1) / kTile, pair = blockIdx.x / tiles, block_r0 = blockIdx.x % tiles * kTile;
  const int w = int(threadIdx.x / 32), lane = int(threadIdx.x % 32), rg = lane / 8, kg = lane % 8;
  const int64_t r0 = block_r0 + 16 * w, lr0 = 16 * w + 4 * rg;  // the warp's first row; the lane's, in the block
  const AttentionPair<float> p = pair_of<float>(a, pair);
  const float scale = scalar_or<float>(a.scale, 1.f), fill = scalar_or<float>(a.fill, 0.f);
  const float *kb = k + a.k.at(p.kv), *vb = v + a.v.at(p.kv);
  stage_f32<kTile>(qs, q + a.q.at(pair), block_r0, a.tq, a.d, a.q.row);
  float o[4][8] = {}, m[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY}, l[4] = {};
  const int steps = int((a.tk + kF32Keys - 1) / kF32Keys);
  auto kind = [&](int n) { return kind_of<kTile, kF32Keys>(a, p.slice, block_r0, int64_t(n) * kF32Keys); };
  LiveTiles map;
  for (LiveTiles::At t = map.next(0, steps, kind); t.n < steps; t = map.next(t.n + 1, steps, kind)) {
    const int64_t j0 = int64_t(t.n) * kF32Keys;
    __syncthreads();  // (the step before done with ks, vs and ps)
    stage_f32<kF32Keys>(ks, kb, j0, a.tk, a.d, a.k.row);
    stage_f32<kF32Keys>(vs, vb, j0, a.tk, a.dv, a.v.row);
    __syncthreads();
    float s[4][4] = {};
#pragma unroll 4
    for (int c = 0; c < kF32Head; c += 4) {
      float4 x[4], kk[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) x[i] = row4(qs, int(lr0) + i, c), kk[i] = row4(ks, kg + 8 * i, c);
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int jj = 0; jj < 4; ++jj) s[i][jj] = dot4(x[i], kk[jj], s[i][jj]);
    }
    const TileKind group[2] = {f32_group(a, p.slice, t.kind, r0, j0), f32_group(a, p.slice, t.kind, r0, j0 + 16)};
    float alpha[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t r = block_r0 + lr0 + i;
      float top = -INFINITY;
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
        s[i][jj] = f32_score(a, p, group[jj / 2], s[i][jj], r, j0 + kg + 8 * jj, scale, fill);
        top = fmaxf(top, s[i][jj]);
      }
#pragma unroll
      for (int x = 1; x < 8; x <<= 1) top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, x));
      const float mn = fmaxf(m[i], top), base = mn == -INFINITY ? 0.f : mn;  // (all -inf so far: nothing to add)
      alpha[i] = __expf(m[i] - base);
      m[i] = mn;
      float sum = 0.f;
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) sum += s[i][jj] = __expf(s[i][jj] - base);
#pragma unroll
      for (int x = 1; x < 8; x <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, x);
      l[i] = l[i] * alpha[i] + sum;
      if (a.dropout) {  // (the kept ones unscaled: drop_scale below)
        const int64_t row = pair * a.tq + r, j64 = j0 / 64 * 64;
        const uint32_t key = blocked_rows(a) ? row_key(a, row, j64) : 0u;
#pragma unroll
        for (int jj = 0; jj < 4; ++jj)
          if (!f32_keeps(a, key, row, j0 + kg + 8 * jj, j64)) s[i][jj] = 0.f;
      }
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) ps[w][4 * rg + i][kg + 8 * jj] = s[i][jj];
#pragma unroll
      for (int e = 0; e < 8; ++e) o[i][e] *= alpha[i];
    }
    __syncwarp();
#pragma unroll 4
    for (int j = 0; j < kF32Keys; ++j) {  // O += P V
      const float4 u = row4(vs, j, 4 * kg), x = row4(vs, j, 32 + 4 * kg);
#pragma unroll
      for (int i = 0; i < 4; ++i) add_scaled(o[i], ps[w][4 * rg + i][j], u, x);
    }
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t r = block_r0 + lr0 + i;
    if (r >= a.tq) continue;
    const bool empty = l[i] == 0;  // a fully masked row: NaN as Softmax gives, or zeros
    const float inv = empty ? (a.zero_masked_rows ? 0.f : NAN) : drop_scale(a) / l[i];
    if (lse && kg == 0) lse[pair * a.tq + r] = empty ? (a.zero_masked_rows ? INFINITY : NAN) : m[i] + logf(l[i]);
    float* yr = y + a.y.at(pair) + r * a.y.row;
#pragma unroll
    for (int e = 0; e < 8; ++e)
      if (const int c = column8(4 * kg, e); c < a.dv) yr[c] = o[i][e] * inv;
  }
}

// dK and dV, and dQ's float32 sums (a.sums' rows; zeroed before): grid (tiles of 32 keys x K's batch), kBlock
// threads. A thread holds keys kq and kq + 16 of the block (kq = thread / 8) by query rows rq + 8 i of a step (rq =
// thread % 8) of the scores, then the same keys by its 8 columns from 4 rq of dK and dV, and rows kq and kq + 16 by
// those columns of the step's dQ.
__global__ void __launch_bounds__(kBlock) grad_f32(Attention a, const float* dy, const float* q, const float* k,
                                                   const float* v, const float* lse, const float* row_dots,
                                                   float* dq_sums, float* dk_out, float* dv_out) {
  __shared__ __align__(16) float ks[kF32Keys][kF32Row];
  __shared__ __align__(16) float vs[kF32Keys][kF32Row];
  __shared__ __align__(16) float qs[kF32Keys][kF32Row];   // the step's query rows
  __shared__ __align__(16) float dys[kF32Keys][kF32Row];  // and their dY
  __shared__ float ps[kF32Keys][kF32Keys + 1];            // P (dropout's mask and scale applied) by key, then row
  __shared__ float dss[kF32Keys][kF32Keys + 1];           // dS likewise
  __shared__ float row_lse[kF32Keys], row_dot[kF32Keys];
  const int64_t tiles = (a.tk + kF32Keys - 1) / kF32Keys, kv = blockIdx.x / tiles, jb0 = blockIdx.x % tiles * kF32Keys;
  const int kq = int(threadIdx.x / 8), rq = int(threadIdx.x % 8), c0 = 4 * rq;
  const float scale = scalar_or<float>(a.scale, 1.f), fill = scalar_or<float>(a.fill, 0.f);
  stage_f32<kF32Keys>(ks, k + a.k.at(kv), jb0, a.tk, a.d, a.k.row);
  stage_f32<kF32Keys>(vs, v + a.v.at(kv), jb0, a.tk, a.dv, a.v.row);
  float dk[2][8] = {}, dv[2][8] = {};
  const int steps = int((a.tq + kF32Keys - 1) / kF32Keys);
  for (KvPairs pairs{kv}; pairs.next(a) < a.pairs;) {
    const int64_t pair = pairs.pair;
    const AttentionPair<float> p = pair_of<float>(a, pair);
    auto kind = [&](int n) { return kind_of<kF32Keys, kF32Keys>(a, p.slice, int64_t(n) * kF32Keys, jb0); };
    LiveTiles map;
    for (LiveTiles::At t = map.next(0, steps, kind); t.n < steps; t = map.next(t.n + 1, steps, kind)) {
      const int64_t r0 = int64_t(t.n) * kF32Keys;
      __syncthreads();  // (the step before done with qs, dys, ps and dss; ks and vs staged)
      stage_f32<kF32Keys>(qs, q + a.q.at(pair), r0, a.tq, a.d, a.q.row);
      stage_f32<kF32Keys>(dys, dy + a.y.at(pair), r0, a.tq, a.dv, a.y.row);
      if (threadIdx.x < kF32Keys) {
        const int64_t r = r0 + threadIdx.x;
        row_lse[threadIdx.x] = r < a.tq ? lse[pair * a.tq + r] : 0.f;
        row_dot[threadIdx.x] = r < a.tq ? row_dots[pair * a.tq + r] : 0.f;
      }
      __syncthreads();
      float s[2][4] = {}, dp[2][4] = {};
#pragma unroll 4
      for (int c = 0; c < kF32Head; c += 4) {
        const float4 kk[2] = {row4(ks, kq, c), row4(ks, kq + 16, c)}, vv[2] = {row4(vs, kq, c), row4(vs, kq + 16, c)};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float4 x = row4(qs, rq + 8 * i, c), g = row4(dys, rq + 8 * i, c);
#pragma unroll
          for (int h = 0; h < 2; ++h) s[h][i] = dot4(kk[h], x, s[h][i]), dp[h][i] = dot4(vv[h], g, dp[h][i]);
        }
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int lr = rq + 8 * i;
        const int64_t r = r0 + lr, row = pair * a.tq + r, j64 = jb0 / 64 * 64;
        const uint32_t key = a.dropout && blocked_rows(a) && r < a.tq ? row_key(a, row, j64) : 0u;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int64_t j = jb0 + kq + 16 * h;
          const TileKind g = f32_group(a, p.slice, t.kind, r0 + lr / 16 * 16, jb0 + 16 * h);
          const float x = f32_score(a, p, g, s[h][i], r, j, scale, fill);
          const bool off = g == TileKind::kMixed && r < a.tq && j < a.tk && masked(a, p.cond, r, j);  // (the fill's)
          const float e = x == -INFINITY ? 0.f : __expf(x - row_lse[lr]);
          const bool keep = !a.dropout || (r < a.tq && j < a.tk && f32_keeps(a, key, row, j, j64));
          const float pd = keep ? e * drop_scale(a) : 0.f, dpk = keep ? dp[h][i] * drop_scale(a) : 0.f;
          ps[kq + 16 * h][lr] = pd;
          dss[kq + 16 * h][lr] = off ? 0.f : e * (dpk - row_dot[lr]) * scale;
        }
      }
      __syncthreads();
      float dq[2][8] = {};
#pragma unroll 4
      for (int n = 0; n < kF32Keys; ++n) {
        const float4 g0 = row4(dys, n, c0), g1 = row4(dys, n, c0 + 32), x0 = row4(qs, n, c0), x1 = row4(qs, n, c0 + 32);
        const float4 k0 = row4(ks, n, c0), k1 = row4(ks, n, c0 + 32);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          add_scaled(dv[h], ps[kq + 16 * h][n], g0, g1);   // (n a row here)
          add_scaled(dk[h], dss[kq + 16 * h][n], x0, x1);
          add_scaled(dq[h], dss[n][kq + 16 * h], k0, k1);  // (n a key here)
        }
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t r = r0 + kq + 16 * h;
        if (r >= a.tq) continue;
        float* sums = dq_sums + a.sums.at(pair, r);
#pragma unroll
        for (int e = 0; e < 8; ++e)
          if (const int c = column8(c0, e); c < a.d) atomicAdd(sums + c, dq[h][e]);
      }
    }
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t j = jb0 + kq + 16 * h;
    if (j >= a.tk) continue;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const int c = column8(c0, e);
      if (c < a.d) dk_out[a.k.at(kv, j) + c] = dk[h][e];
      if (c < a.dv) dv_out[a.v.at(kv, j) + c] = dv[h][e];
    }
  }
}

}  // namespace onnxtrain::kernels::cuda::ONNXTRAIN_MMA_ATTENTION
