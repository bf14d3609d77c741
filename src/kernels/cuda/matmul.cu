// Batched GEMM on the GPU: cuBLASLt's where it takes the product (lt_gemm.cpp), else 32x32 output tiles through
// shared memory, float32 accumulation, any operand strides (transposes and broadcast batches without copies).
#include "kernels/cuda/device_types.cuh"
#include "kernels/cuda/runtime.h"

namespace onnxtrain::kernels::cuda {
namespace {

constexpr int kTile = 32;

// (C0 of the operands' type T, or the output's O.)
template <typename T, typename O, typename C0>
__global__ void gemm_kernel(const T* a, const T* b, O* c, GemmShape s) {
  __shared__ float as[kTile][kTile + 1], bs[kTile][kTile + 1];
  const int64_t batch = blockIdx.z;
  Offsets<2> o = offsets<2>(s.batch, batch);
  const T* ab = a + o.at[0];
  const T* bb = b + o.at[1];
  const int64_t row = int64_t(blockIdx.y) * kTile + threadIdx.y, col = int64_t(blockIdx.x) * kTile + threadIdx.x;
  float acc = 0;
  for (int64_t k0 = 0; k0 < s.k; k0 += kTile) {
    const int64_t ka = k0 + threadIdx.x, kb = k0 + threadIdx.y;
    as[threadIdx.y][threadIdx.x] = row < s.m && ka < s.k ? to_float(ab[row * s.a_rs + ka * s.a_cs]) : 0.f;
    bs[threadIdx.y][threadIdx.x] = kb < s.k && col < s.n ? to_float(bb[kb * s.b_rs + col * s.b_cs]) : 0.f;
    __syncthreads();
#pragma unroll 8
    for (int kk = 0; kk < kTile; ++kk) acc = fmaf(as[threadIdx.y][kk], bs[kk][threadIdx.x], acc);
    __syncthreads();
  }
  if (row >= s.m || col >= s.n) return;
  float v = s.alpha * acc;
  if (s.c0) v += s.beta * to_float(static_cast<const C0*>(s.c0)[row * s.c0_rs + col * s.c0_cs]);
  c[batch * s.m * s.n + row * s.n + col] = from_float<O>(v);
}

}  // namespace

void gemm(DType t, DType out, const void* a, const void* b, void* c, const GemmShape& s, cudaStream_t stream) {
  const int64_t batches = numel(s.batch);
  if (batches == 0 || s.m == 0 || s.n == 0) return;
  if (out != t && (out != DType::kFloat32 || t == DType::kFloat32)) unsupported_dtype("gemm's output", out);
  if (s.c0 && s.c0_dtype != t && s.c0_dtype != out) unsupported_dtype("gemm's base", s.c0_dtype);
  if (lt_gemm(t, out, a, b, c, s, stream)) return;
  if (batches > 65535) launch_error("gemm: more than 65535 batches");
  dim3 grid(unsigned((s.n + kTile - 1) / kTile), unsigned((s.m + kTile - 1) / kTile), unsigned(batches));
  dim3 block(kTile, kTile);
  bool ok = with_float_type(t, [&](auto v) {
    using T = decltype(v);
    const T *at = static_cast<const T*>(a), *bt = static_cast<const T*>(b);
    if (out == t)
      gemm_kernel<T, T, T><<<grid, block, 0, stream>>>(at, bt, static_cast<T*>(c), s);
    else if (!s.c0 || s.c0_dtype == t)
      gemm_kernel<T, float, T><<<grid, block, 0, stream>>>(at, bt, static_cast<float*>(c), s);
    else
      gemm_kernel<T, float, float><<<grid, block, 0, stream>>>(at, bt, static_cast<float*>(c), s);
  });
  if (!ok) unsupported_dtype("gemm", t);
  check_launch("gemm");
}

}  // namespace onnxtrain::kernels::cuda
