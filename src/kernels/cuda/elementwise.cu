// Elementwise CUDA kernels: unary and binary ops (broadcast by strides), Where, Cast, fills and Dropout.
#include "kernels/cuda/device_types.cuh"
#include "kernels/cuda/dropout_kernels.cuh"
#include "kernels/cuda/packed_map.cuh"
#include "kernels/cuda/runtime.h"

namespace onnxtrain::kernels::cuda {
namespace {

// GELU's derivative at x: Phi(x) + x phi(x), or the tanh form's.
__device__ __forceinline__ float gelu_derivative(bool tanh_form, float x) {
  if (!tanh_form) return 0.5f * (1.f + erff(x * 0.70710678118654752f)) + x * 0.39894228040143268f * expf(-0.5f * x * x);
  const float k = 0.79788456080286536f, t = tanhf(k * (x + 0.044715f * x * x * x));
  return 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * k * (1.f + 3.f * 0.044715f * x * x);
}

// GELU and dy GELU'(x) as functions of their own, never inlined: Gelu's and GeluGrad's kernels and GeluAndGrad's
// (both in one pass) run the same instructions, so a recomputed GELU and its gradient have the bits they have apart
// (inlined into each kernel, the compiler contracted their arithmetic into fused multiply-adds differently: float32
// gradients a last bit apart on an H200).
__device__ __noinline__ float gelu_of(bool tanh_form, float x) {
  if (tanh_form) return 0.5f * x * (1.f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
  return 0.5f * x * (1.f + erff(x * 0.70710678118654752f));
}
__device__ __noinline__ float gelu_grad_of(bool tanh_form, float dy, float x) {
  return dy * gelu_derivative(tanh_form, x);
}

__device__ __forceinline__ float apply(Unary op, float x) {
  switch (op) {
    case Unary::kRelu: return x > 0 ? x : 0.f;
    case Unary::kNeg: return -x;
    case Unary::kAbs: return fabsf(x);
    case Unary::kExp: return expf(x);
    case Unary::kLog: return logf(x);
    case Unary::kSqrt: return sqrtf(x);
    case Unary::kReciprocal: return 1.f / x;
    case Unary::kTanh: return tanhf(x);
    case Unary::kSigmoid: return 1.f / (1.f + expf(-x));
    case Unary::kErf: return erff(x);
    case Unary::kSin: return sinf(x);
    case Unary::kCos: return cosf(x);
    case Unary::kFloor: return floorf(x);
    case Unary::kCeil: return ceilf(x);
    case Unary::kGelu: return gelu_of(false, x);
    case Unary::kGeluTanh: return gelu_of(true, x);
  }
  return x;
}

// The ops as functions of one element (a second operand ignored where there is none), for packed_map.
template <typename T>
struct UnaryOf {
  Unary op;
  __device__ T operator()(T x, T) const { return from_float<T>(apply(op, to_float(x))); }
};

template <typename T>
__global__ void unary_int(Unary op, const T* x, T* y, int64_t n) {
  ONNXTRAIN_GRID_LOOP(i, n) {
    T v = x[i];
    y[i] = op == Unary::kRelu ? (v > 0 ? v : T(0)) : op == Unary::kNeg ? T(-v) : (v < 0 ? T(-v) : v);
  }
}

__global__ void not_kernel(const bool* x, bool* y, int64_t n) {
  ONNXTRAIN_GRID_LOOP(i, n) y[i] = !x[i];
}

template <typename T>
__device__ __forceinline__ T arith(Binary op, T a, T b) {
  switch (op) {
    case Binary::kAdd: return a + b;
    case Binary::kSub: return a - b;
    case Binary::kMul: return a * b;
    case Binary::kDiv: return a / b;
    case Binary::kMax: return (a != a || a >= b) ? a : b;
    case Binary::kMin: return (a != a || a <= b) ? a : b;
    default: return T(0);
  }
}

__device__ __forceinline__ float arith_float(Binary op, float a, float b) {
  switch (op) {
    case Binary::kPow: return powf(a, b);
    case Binary::kGeluGrad: return gelu_grad_of(false, a, b);
    case Binary::kGeluTanhGrad: return gelu_grad_of(true, a, b);
    default: return arith(op, a, b);
  }
}

// GeluAndGrad's elements by the functions GeluGrad's and Gelu's kernels compute them with: V consecutive elements a
// thread (packs_align), the n % V past the last whole pack one each to the grid's first threads.
template <typename T, int V>
__global__ void gelu_and_grad_kernel(bool tanh_form, const T* dy, const T* x, T* dx, T* y, int64_t n) {
  auto one = [&](T d, T v, T& gx, T& gy) {
    gx = from_float<T>(gelu_grad_of(tanh_form, to_float(d), to_float(v)));
    gy = from_float<T>(gelu_of(tanh_form, to_float(v)));
  };
  const int64_t packs = n / V;
  ONNXTRAIN_GRID_LOOP(p, packs) {
    const Pack<T, V> ds = reinterpret_cast<const Pack<T, V>*>(dy)[p], xs = reinterpret_cast<const Pack<T, V>*>(x)[p];
    Pack<T, V> gx, gy;
#pragma unroll
    for (int k = 0; k < V; ++k) one(ds.at[k], xs.at[k], gx.at[k], gy.at[k]);
    reinterpret_cast<Pack<T, V>*>(dx)[p] = gx;
    reinterpret_cast<Pack<T, V>*>(y)[p] = gy;
  }
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, i = packs * V + t;
  if (t < V && i < n) {
    T gx, gy;
    one(dy[i], x[i], gx, gy);
    dx[i] = gx, y[i] = gy;
  }
}

template <typename T>
__device__ __forceinline__ bool compare(Binary op, T a, T b) {
  switch (op) {
    case Binary::kEqual: return a == b;
    case Binary::kLess: return a < b;
    case Binary::kLessOrEqual: return a <= b;
    case Binary::kGreater: return a > b;
    case Binary::kGreaterOrEqual: return a >= b;
    case Binary::kAnd: return a && b;
    case Binary::kOr: return a || b;
    case Binary::kXor: return bool(a) != bool(b);
    default: return false;
  }
}

__host__ __device__ __forceinline__ bool is_comparison(Binary op) { return op >= Binary::kEqual; }

template <typename T>
struct BinaryOf {
  Binary op;
  __device__ T operator()(T x, T y) const { return from_float<T>(arith_float(op, to_float(x), to_float(y))); }
};

template <typename T>
__global__ void binary_float(Binary op, const T* a, const T* b, void* out, Indexing ix, int64_t n) {
  ONNXTRAIN_GRID_LOOP(i, n) {
    Offsets<2> o = offsets<2>(ix, i);
    float x = to_float(a[o.at[0]]), y = to_float(b[o.at[1]]);
    if (is_comparison(op))
      static_cast<bool*>(out)[i] = compare(op, x, y);
    else
      static_cast<T*>(out)[i] = from_float<T>(arith_float(op, x, y));
  }
}

template <typename T>
__global__ void binary_exact(Binary op, const T* a, const T* b, void* out, Indexing ix, int64_t n) {
  ONNXTRAIN_GRID_LOOP(i, n) {
    Offsets<2> o = offsets<2>(ix, i);
    T x = a[o.at[0]], y = b[o.at[1]];
    if (is_comparison(op))
      static_cast<bool*>(out)[i] = compare(op, x, y);
    else
      static_cast<T*>(out)[i] = arith(op, x, y);
  }
}

template <typename T>
__global__ void where_kernel(const bool* cond, const T* a, const T* b, T* out, Indexing ix, int64_t n) {
  ONNXTRAIN_GRID_LOOP(i, n) {
    Offsets<3> o = offsets<3>(ix, i);
    out[i] = cond[o.at[0]] ? a[o.at[1]] : b[o.at[2]];
  }
}

// Conversions through float for the low-precision types; exact ones between the others, as C++ converts.
template <typename From>
__device__ __forceinline__ auto widened(From x) {
  if constexpr (std::is_same_v<From, __half> || std::is_same_v<From, __nv_bfloat16>)
    return to_float(x);
  else
    return x;
}
template <typename To, typename W>
__device__ __forceinline__ To narrowed(W x) {
  if constexpr (std::is_same_v<To, __half> || std::is_same_v<To, __nv_bfloat16>)
    return from_float<To>(float(x));
  else if constexpr (std::is_same_v<To, bool>)
    return x != W(0);
  else
    return To(x);
}

template <typename From, typename To>
struct CastOf {
  __device__ To operator()(From x, From) const { return narrowed<To>(widened(x)); }
};

template <typename T>
constexpr bool kFloatType = std::is_same_v<T, float> || std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;

template <typename T>
__global__ void fill_kernel(T value, T* dst, int64_t n) {
  ONNXTRAIN_GRID_LOOP(i, n) dst[i] = value;
}

template <typename T>
__global__ void range_kernel(T start, T delta, T* dst, int64_t n) {
  ONNXTRAIN_GRID_LOOP(i, n) dst[i] = T(start + T(i) * delta);
}

struct Int64s {
  int64_t v[kMaxRank];
};
__global__ void write_int64_kernel(Int64s values, int n, int64_t* dst) {
  if (int(threadIdx.x) < n) dst[threadIdx.x] = values.v[threadIdx.x];
}

// Calls f with a value of the device element type of t, for every dtype Cast takes.
template <typename F>
void with_any_type(DType t, const char* kernel, F&& f) {
  if (with_float_type(t, f)) return;
  switch (t) {
    case DType::kFloat64: return f(double{});
    case DType::kInt64: return f(int64_t{});
    case DType::kInt32: return f(int32_t{});
    case DType::kInt8: return f(int8_t{});
    case DType::kUInt8: return f(uint8_t{});
    case DType::kBool: return f(bool{});
    default: unsupported_dtype(kernel, t);
  }
}

}  // namespace

void unary(Unary op, DType t, const void* x, void* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  if ((op == Unary::kNot) != (t == DType::kBool)) unsupported_dtype(op == Unary::kNot ? "Not" : "unary", t);
  if (op == Unary::kNot) {
    not_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const bool*>(x), static_cast<bool*>(y), n);
    return check_launch("Not");
  }
  bool ok = with_float_type(t, [&](auto v) {
    using T = decltype(v);
    packed_map(UnaryOf<T>{op}, static_cast<const T*>(x), static_cast<const T*>(nullptr), static_cast<T*>(y), n,
               stream);
  });
  if (!ok) {
    if (op != Unary::kRelu && op != Unary::kNeg && op != Unary::kAbs) unsupported_dtype("unary", t);
    if (t == DType::kInt64)
      unary_int<<<blocks_for(n), kThreads, 0, stream>>>(op, static_cast<const int64_t*>(x), static_cast<int64_t*>(y),
                                                        n);
    else if (t == DType::kInt32)
      unary_int<<<blocks_for(n), kThreads, 0, stream>>>(op, static_cast<const int32_t*>(x), static_cast<int32_t*>(y),
                                                        n);
    else
      unsupported_dtype("unary", t);
  }
  check_launch("unary");
}

void binary(Binary op, DType t, const void* a, const void* b, void* out, const Indexing& ix, cudaStream_t stream) {
  const int64_t n = numel(ix);
  if (n == 0) return;
  const bool logical = op == Binary::kAnd || op == Binary::kOr || op == Binary::kXor;
  if (logical != (t == DType::kBool)) unsupported_dtype("binary", t);
  if (logical) {
    binary_exact<<<blocks_for(n), kThreads, 0, stream>>>(op, static_cast<const bool*>(a), static_cast<const bool*>(b),
                                                         out, ix, n);
    return check_launch("binary");
  }
  // (operands of the output's one shape, contiguous after coalescing: packs of 16 bytes where they align)
  const bool flat = ix.rank == 1 && ix.strides[0][0] == 1 && ix.strides[1][0] == 1 && !is_comparison(op);
  bool ok = with_float_type(t, [&](auto v) {
    using T = decltype(v);
    const T *as = static_cast<const T*>(a), *bs = static_cast<const T*>(b);
    if (flat)
      packed_map(BinaryOf<T>{op}, as, bs, static_cast<T*>(out), n, stream);
    else
      binary_float<T><<<blocks_for(n), kThreads, 0, stream>>>(op, as, bs, out, ix, n);
  });
  if (!ok) {
    // Integer Div and Pow keep the CPU's rules (division by zero, negative exponents): not here.
    if (op == Binary::kDiv || op == Binary::kPow || op == Binary::kGeluGrad || op == Binary::kGeluTanhGrad)
      unsupported_dtype("binary", t);
    if (t == DType::kInt64)
      binary_exact<<<blocks_for(n), kThreads, 0, stream>>>(op, static_cast<const int64_t*>(a),
                                                           static_cast<const int64_t*>(b), out, ix, n);
    else if (t == DType::kInt32)
      binary_exact<<<blocks_for(n), kThreads, 0, stream>>>(op, static_cast<const int32_t*>(a),
                                                           static_cast<const int32_t*>(b), out, ix, n);
    else
      unsupported_dtype("binary", t);
  }
  check_launch("binary");
}

void gelu_and_grad(bool tanh_form, DType t, const void* dy, const void* x, void* dx, void* y, int64_t n,
                   cudaStream_t stream) {
  if (n == 0) return;
  const bool ok = with_float_type(t, [&](auto v) {
    using T = decltype(v);
    constexpr int V = pack_lanes<T, T>();
    const T *d = static_cast<const T*>(dy), *xp = static_cast<const T*>(x);
    T *gx = static_cast<T*>(dx), *gy = static_cast<T*>(y);
    if (packs_align<T>(d, V) && packs_align<T>(xp, V) && packs_align<T>(gx, V) && packs_align<T>(gy, V))
      gelu_and_grad_kernel<T, V><<<blocks_for((n + V - 1) / V), kThreads, 0, stream>>>(tanh_form, d, xp, gx, gy, n);
    else
      gelu_and_grad_kernel<T, 1><<<blocks_for(n), kThreads, 0, stream>>>(tanh_form, d, xp, gx, gy, n);
  });
  if (!ok) unsupported_dtype("GeluAndGrad", t);
  check_launch("GeluAndGrad");
}

void where(int elem_bytes, const bool* cond, const void* a, const void* b, void* out, const Indexing& ix,
           cudaStream_t stream) {
  const int64_t n = numel(ix);
  if (n == 0) return;
  with_bytes(elem_bytes, "Where", [&](auto v) {
    using T = decltype(v);
    where_kernel<<<blocks_for(n), kThreads, 0, stream>>>(cond, static_cast<const T*>(a), static_cast<const T*>(b),
                                                         static_cast<T*>(out), ix, n);
  });
  check_launch("Where");
}

void cast(DType from, DType to, const void* x, void* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  with_any_type(from, "Cast", [&](auto f) {
    with_any_type(to, "Cast", [&](auto t) {
      using F = decltype(f);
      using T = decltype(t);
      const F *xs = static_cast<const F*>(x), *none = nullptr;
      if constexpr (kFloatType<F> && kFloatType<T>)  // (between float types: packs of 16 bytes where they align)
        packed_map(CastOf<F, T>{}, xs, none, static_cast<T*>(y), n, stream);
      else
        packed_map_kernel<1><<<blocks_for(n), kThreads, 0, stream>>>(CastOf<F, T>{}, xs, none, static_cast<T*>(y), n);
    });
  });
  check_launch("Cast");
}

void fill(int elem_bytes, const void* value, void* dst, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  with_bytes(elem_bytes, "fill", [&](auto v) {
    using T = decltype(v);
    T bits;
    memcpy(&bits, value, sizeof(T));
    fill_kernel<<<blocks_for(n), kThreads, 0, stream>>>(bits, static_cast<T*>(dst), n);
  });
  check_launch("fill");
}

void range(DType t, const void* start, const void* delta, void* dst, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  auto launch = [&](auto v) {
    using T = decltype(v);
    T s, d;
    memcpy(&s, start, sizeof(T));
    memcpy(&d, delta, sizeof(T));
    range_kernel<<<blocks_for(n), kThreads, 0, stream>>>(s, d, static_cast<T*>(dst), n);
  };
  switch (t) {
    case DType::kFloat32: launch(float{}); break;
    case DType::kFloat64: launch(double{}); break;
    case DType::kInt32: launch(int32_t{}); break;
    case DType::kInt64: launch(int64_t{}); break;
    default: unsupported_dtype("Range", t);
  }
  check_launch("Range");
}

void write_int64(const int64_t (&values)[kMaxRank], int n, int64_t* dst, cudaStream_t stream) {
  if (n == 0) return;
  Int64s v;
  for (int i = 0; i < kMaxRank; ++i) v.v[i] = values[i];
  write_int64_kernel<<<1, kMaxRank, 0, stream>>>(v, n, dst);
  check_launch("write_int64");
}

void dropout(DType t, DType yt, const void* x, const void* r, void* y, bool* mask, int64_t n, uint64_t seed,
             uint32_t threshold, float scale, cudaStream_t stream) {
  if (n == 0) return;
  auto launch = [&](auto vi, auto vo) {
    using In = decltype(vi);
    using Out = decltype(vo);
    const In* xp = static_cast<const In*>(x);
    const Out* rp = static_cast<const Out*>(r);
    Out* yp = static_cast<Out*>(y);
    constexpr int V = kDropoutPack;
    if (packs_align<In>(xp, V) && packs_align<Out>(rp, V) && packs_align<Out>(yp, V) && packs_align<bool>(mask, V))
      dropout_packs_kernel<<<blocks_for((n + V - 1) / V), kThreads, 0, stream>>>(xp, rp, yp, mask, n, seed,
                                                                                  threshold, scale);
    else
      dropout_kernel<<<blocks_for(n), kThreads, 0, stream>>>(xp, rp, yp, mask, n, seed, threshold, scale);
  };
  const bool ok = t == DType::kFloat32 ? with_float_pair(t, yt, launch)
                                       : with_float_pair(yt, t, [&](auto vo, auto vi) { launch(vi, vo); });
  if (!ok) unsupported_dtype("Dropout", t == yt ? t : t == DType::kFloat32 ? yt : t);
  check_launch("Dropout");
}

}  // namespace onnxtrain::kernels::cuda
