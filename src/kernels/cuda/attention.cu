// Fused attention on the GPU, forward and backward: the launches of the tiled kernels (16-bit operands with heads of
// up to 128 elements on tensor cores, attention_mma.cuh; float32 ones with heads of up to 64, attention_f32.cuh) and
// of the warp-per-row kernels for the rest (attention_warp_rows.cuh).
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/attention_f32.cuh"
#include "kernels/cuda/attention_mma.cuh"
#include "kernels/cuda/attention_warp_rows.cuh"
#include "kernels/cuda/runtime.h"

namespace onnxtrain::kernels::cuda {
namespace tc = mma_attention;  // the kernels of attention_tiles.cuh's namespace: tiled and warp-per-row
namespace {

// dQ's float32 sums (a.sums' rows) cast into dQ's rows in X (packed): an element a thread.
template <typename T>
__global__ void cast_rows(Attention a, const float* sums, T* dq) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= a.pairs * a.tq * a.d) return;
  const int64_t row = i / a.d, c = i % a.d, pair = row / a.tq, r = row % a.tq;
  dq[a.q.at(pair, r) + c] = from_float<T>(sums[a.sums.at(pair, r) + c]);
}

unsigned to_blocks(int64_t units, int64_t per_block, const char* kernel) {
  const int64_t blocks = (units + per_block - 1) / per_block;
  if (blocks > 0x7fffffff) launch_error(std::string(kernel) + ": more than 2^31 blocks");
  return unsigned(blocks);
}

// ONNXTRAIN_CUDA_ATTENTION, for comparison: "simple" takes the warp-per-row kernels for every dtype, "general" the
// tensor-core kernels' general build alone (attention_builds.cuh).
bool attention_env_is(const char* mode) {
  const char* v = std::getenv("ONNXTRAIN_CUDA_ATTENTION");
  return v && std::strcmp(v, mode) == 0;
}

bool simple_kernels() {
  static const bool simple = attention_env_is("simple");
  return simple;
}

// The tensor-core kernels' head size (attention_mma.cuh) for 16-bit operands with heads of at most 128 elements;
// 0 for the others: float32 operands, larger heads, or all of them with ONNXTRAIN_CUDA_ATTENTION=simple.
int mma_head(DType t, const Attention& a) {
  const int64_t head = std::max(a.d, a.dv);
  if (simple_kernels() || (t != DType::kFloat16 && t != DType::kBFloat16)) return 0;
  return head <= 64 ? 64 : head <= 128 ? 128 : 0;
}

// Whether float32 operands take the tiled kernels (attention_f32.cuh): heads of at most 64 elements, unless
// ONNXTRAIN_CUDA_ATTENTION=simple.
bool f32_tiles(const Attention& a) { return !simple_kernels() && std::max(a.d, a.dv) <= tc::kF32Head; }

// The tensor-core kernels' map of the tiles a mask or a bias changes (attention_tile_kind.cuh), into a.kinds.
template <typename T>
void map_tile_kinds(const Attention& a, const char* name, cudaStream_t stream) {
  if (!a.cond && !a.bias) return;
  if (!a.kinds) launch_error(std::string(name) + ": no map of its mask's tiles");
  check(cudaMemsetAsync(a.mixed, 0, kMixedBytes, stream), name);
  if (a.pairs * a.tq * a.tk == 0) return;
  tc::tile_kinds<T><<<to_blocks(tc::tile_kinds_blocks(a), 1, name), tc::kBlock, 0, stream>>>(a);
}

// Whether the tensor-core kernels take their general build alone (ONNXTRAIN_CUDA_ATTENTION=general).
bool general_build() {
  static const bool general = attention_env_is("general");
  return general;
}

// f.template operator()<D>() for the tensor-core kernels' head size D.
template <typename F>
void with_head(int head, F&& f) {
  if (head == 64)
    f.template operator()<64>();
  else
    f.template operator()<128>();
}

}  // namespace

void flash_attention(DType t, const Attention& a, const void* q, const void* k, const void* v, void* y, float* lse,
                     cudaStream_t stream) {
  const int64_t rows = a.pairs * a.tq;
  if (rows == 0) return;
  const int head = mma_head(t, a);
  bool ok = with_float_type(t, [&](auto x) {
    using T = decltype(x);
    const T *qt = static_cast<const T*>(q), *kt = static_cast<const T*>(k), *vt = static_cast<const T*>(v);
    if constexpr (std::is_same_v<T, float>)
      if (f32_tiles(a)) {
        map_tile_kinds<T>(a, "FlashAttention", stream);
        const int64_t blocks = to_blocks(a.tq, tc::kTile, "FlashAttention") * a.pairs;
        tc::forward_f32<<<to_blocks(blocks, 1, "FlashAttention"), tc::kBlock, 0, stream>>>(a, qt, kt, vt,
                                                                                         static_cast<T*>(y), lse);
        return;
      }
    if constexpr (!std::is_same_v<T, float>)
      if (head) {
        map_tile_kinds<T>(a, "FlashAttention", stream);
        const int64_t blocks = to_blocks(a.tq, tc::kTile, "FlashAttention") * a.pairs;
        return with_head(head, [&]<int D>() {
          tc::with_builds(a, general_build(), [&]<bool kLean>(const Attention& b) {
            tc::forward<T, D, kLean><<<to_blocks(blocks, 1, "FlashAttention"), tc::kBlock, 0, stream>>>(
                b, qt, kt, vt, static_cast<T*>(y), lse);
          });
        });
      }
    tc::rows_forward<<<to_blocks(rows, tc::kRowWarps, "FlashAttention"), kThreads, 0, stream>>>(a, qt, kt, vt,
                                                                                        static_cast<T*>(y), lse);
  });
  if (!ok) unsupported_dtype("FlashAttention", t);
  check_launch("FlashAttention");
}

void flash_attention_grad(DType t, const Attention& a, const void* dy, const void* q, const void* k, const void* v,
                          const void* y, const float* lse, float* row_dots, float* dq_sums, void* dq, void* dk,
                          void* dv, cudaStream_t stream) {
  const int64_t rows = a.pairs * a.tq, keys = a.kv_count * a.tk;
  const int head = mma_head(t, a);
  bool ok = with_float_type(t, [&](auto x) {
    using T = decltype(x);
    const T *dyt = static_cast<const T*>(dy), *qt = static_cast<const T*>(q), *kt = static_cast<const T*>(k),
            *vt = static_cast<const T*>(v);
    bool tiled = head != 0;  // (the tiled kernels sum dQ in float32 by atomics, then cast the sums into dQ)
    if constexpr (std::is_same_v<T, float>) tiled = f32_tiles(a);
    if (tiled) {
      const char* name = "FlashAttentionGrad";
      map_tile_kinds<T>(a, name, stream);
      float* sums = dq_sums;
      if constexpr (std::is_same_v<T, float>)
        if (!a.packed) sums = static_cast<float*>(dq);  // (dQ lies as its sums: summed in place)
      if (!sums) launch_error(std::string(name) + ": no scratch for dQ's sums (summed_dq)");
      if (rows) {
        tc::row_dots<T><<<to_blocks(rows, tc::kBlock / 32, name), tc::kBlock, 0, stream>>>(
            a, dyt, static_cast<const T*>(y), row_dots);
        check(cudaMemsetAsync(sums, 0, size_t(rows * a.d) * sizeof(float), stream), name);
      }
      if (keys) {  // (no rows: dK and dV zeros)
        if constexpr (std::is_same_v<T, float>) {
          const int64_t blocks = to_blocks(a.tk, tc::kF32Keys, name) * a.kv_count;
          tc::grad_f32<<<to_blocks(blocks, 1, name), tc::kBlock, 0, stream>>>(a, dyt, qt, kt, vt, lse, row_dots, sums,
                                                                             static_cast<T*>(dk), static_cast<T*>(dv));
        } else {
          with_head(head, [&]<int D>() {
            const int64_t blocks = to_blocks(a.tk, tc::kTile, name) * a.kv_count;
            tc::with_builds(a, general_build(), [&]<bool kLean>(const Attention& b) {
              tc::grad<T, D, kLean><<<to_blocks(blocks, 1, name), tc::kBlock, 0, stream>>>(
                  b, dyt, qt, kt, vt, lse, row_dots, sums, static_cast<T*>(dk), static_cast<T*>(dv));
            });
          });
        }
      }
      if (a.packed)  // (no keys: dQ zeros)
        cast_rows<T><<<to_blocks(rows * a.d, kThreads, name), kThreads, 0, stream>>>(a, sums, static_cast<T*>(dq));
      else if (sums != dq)
        cast(DType::kFloat32, t, sums, dq, rows * a.d, stream);
      return;
    }
    if (rows)
      tc::rows_dq<<<to_blocks(rows, tc::kRowWarps, "FlashAttentionGrad"), kThreads, 0, stream>>>(
          a, dyt, qt, kt, vt, static_cast<const T*>(y), lse, row_dots, static_cast<T*>(dq));
    if (keys)  // (after rows_dq on the stream: it reads the rows' D)
      tc::rows_dkv<<<to_blocks(keys, tc::kRowWarps, "FlashAttentionGrad"), kThreads, 0, stream>>>(
          a, dyt, qt, kt, vt, lse, row_dots, static_cast<T*>(dk), static_cast<T*>(dv));
  });
  if (!ok) unsupported_dtype("FlashAttentionGrad", t);
  check_launch("FlashAttentionGrad");
}

}  // namespace onnxtrain::kernels::cuda
