// Gather, GatherND, GatherElements, ScatterND and ScatterElements on the GPU: one thread per element moved; the
// scatters' additions are atomic, so repeated indices (an embedding's gradient) add up whatever the order.
#include "kernels/cuda/device_types.cuh"
#include "kernels/cuda/runtime.h"

namespace onnxtrain::kernels::cuda {
namespace {

template <typename T, typename I>
__global__ void gather_kernel(const T* x, const I* idx, T* y, int64_t n, int64_t count, int64_t inner,
                              int64_t total) {
  ONNXTRAIN_GRID_LOOP(e, total) {
    const int64_t k = e % inner, j = e / inner % count, o = e / inner / count;
    int64_t i = int64_t(idx[j]);
    if (i < 0) i += n;
    y[e] = i >= 0 && i < n ? x[(o * n + i) * inner + k] : T(0);
  }
}

// The offset update u's indices point to; -1 when one is out of range.
__device__ __forceinline__ int64_t nd_offset(const int64_t* idx, int64_t u, const NdIndex& nd) {
  int64_t off = 0;
  for (int d = 0; d < nd.k; ++d) {
    int64_t i = idx[u * nd.k + d];
    if (i < 0) i += nd.dims[d];
    if (i < 0 || i >= nd.dims[d]) return -1;
    off += i * nd.strides[d];
  }
  return off;
}

template <typename T>
__global__ void scatter_add_kernel(const int64_t* idx, const T* upd, T* out, int64_t slice, NdIndex nd, int64_t total) {
  ONNXTRAIN_GRID_LOOP(e, total) {
    const int64_t off = nd_offset(idx, e / slice, nd);
    if (off >= 0) atomicAdd(out + off + e % slice, upd[e]);
  }
}

template <typename T>
__global__ void scatter_set_kernel(const int64_t* idx, const T* upd, T* out, int64_t slice, NdIndex nd,
                                   int64_t total) {
  ONNXTRAIN_GRID_LOOP(e, total) {
    const int64_t off = nd_offset(idx, e / slice, nd);
    if (off >= 0) out[off + e % slice] = upd[e];
  }
}

template <typename T>
__global__ void gather_nd_kernel(const int64_t* idx, const T* x, T* y, int64_t per_batch, int64_t batch_stride,
                                 int64_t slice, NdIndex nd, int64_t total) {
  ONNXTRAIN_GRID_LOOP(e, total) {
    const int64_t row = e / slice, off = nd_offset(idx, row, nd);
    y[e] = off < 0 ? T(0) : x[row / per_batch * batch_stride + off + e % slice];
  }
}

// GatherElements' and ScatterElements' element i of the indices: its data offset, its coordinate along the axis
// the index there (negative ones from the end); -1 when out of range.
template <typename I>
__device__ __forceinline__ int64_t element_offset(const I* idx, const ElementIndex& e, int64_t i) {
  const Offsets<2> o = offsets<2>(e.walk, i);
  int64_t k = int64_t(idx[o.at[1]]);
  if (k < 0) k += e.n;
  return k < 0 || k >= e.n ? -1 : o.at[0] + k * e.axis_stride;
}

template <typename T, typename I>
__global__ void gather_elements_kernel(const T* x, const I* idx, T* y, ElementIndex e, int64_t total) {
  ONNXTRAIN_GRID_LOOP(i, total) {
    const int64_t off = element_offset(idx, e, i);
    y[i] = off < 0 ? T(0) : x[off];
  }
}

template <typename T, typename I, bool kAdd>
__global__ void scatter_elements_kernel(const I* idx, const T* upd, T* out, ElementIndex e, int64_t total) {
  ONNXTRAIN_GRID_LOOP(i, total) {
    const int64_t off = element_offset(idx, e, i);
    if (off < 0) continue;
    if constexpr (kAdd)
      atomicAdd(out + off, upd[i]);
    else
      out[off] = upd[i];
  }
}

// Calls f with a value of the index type (int64 or int32).
template <typename F>
void with_index_type(DType t, const char* kernel, F&& f) {
  if (t == DType::kInt64) return f(int64_t{});
  if (t == DType::kInt32) return f(int32_t{});
  unsupported_dtype(kernel, t);
}

}  // namespace

void gather(int elem_bytes, const void* x, DType idx_type, const void* idx, void* y, int64_t outer, int64_t n,
            int64_t count, int64_t inner, cudaStream_t stream) {
  const int64_t total = outer * count * inner;
  if (total == 0) return;
  with_bytes(elem_bytes, "Gather", [&](auto v) {
    using T = decltype(v);
    with_index_type(idx_type, "Gather's indices", [&](auto i) {
      using I = decltype(i);
      gather_kernel<<<blocks_for(total), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<const I*>(idx),
                                                                static_cast<T*>(y), n, count, inner, total);
    });
  });
  check_launch("Gather");
}

void gather_nd(int elem_bytes, const int64_t* idx, const void* x, void* y, int64_t rows, int64_t per_batch,
               int64_t batch_stride, int64_t slice, const NdIndex& nd, cudaStream_t stream) {
  const int64_t total = rows * slice;
  if (total == 0) return;
  with_bytes(elem_bytes, "GatherND", [&](auto v) {
    using T = decltype(v);
    gather_nd_kernel<<<blocks_for(total), kThreads, 0, stream>>>(idx, static_cast<const T*>(x), static_cast<T*>(y),
                                                                 per_batch < 1 ? 1 : per_batch, batch_stride, slice,
                                                                 nd, total);
  });
  check_launch("GatherND");
}

void scatter_nd(DType t, bool add, const int64_t* idx, const void* updates, void* out, int64_t count, int64_t slice,
                const NdIndex& nd, cudaStream_t stream) {
  const int64_t total = count * slice;
  if (total == 0) return;
  if (!add) {
    with_bytes(int(dtype_size(t)), "ScatterND", [&](auto v) {
      using T = decltype(v);
      scatter_set_kernel<<<blocks_for(total), kThreads, 0, stream>>>(idx, static_cast<const T*>(updates),
                                                                     static_cast<T*>(out), slice, nd, total);
    });
    return check_launch("ScatterND");
  }
  auto launch = [&](auto v) {
    using T = decltype(v);
    scatter_add_kernel<<<blocks_for(total), kThreads, 0, stream>>>(idx, static_cast<const T*>(updates),
                                                                   static_cast<T*>(out), slice, nd, total);
  };
  if (t == DType::kFloat64)
    launch(double{});
  else if (!with_float_type(t, launch))
    unsupported_dtype("ScatterND's addition", t);
  check_launch("ScatterND");
}

void gather_elements(int elem_bytes, const void* x, DType idx_type, const void* idx, void* y, const ElementIndex& e,
                     cudaStream_t stream) {
  const int64_t total = numel(e.walk);
  if (total == 0) return;
  with_bytes(elem_bytes, "GatherElements", [&](auto v) {
    using T = decltype(v);
    with_index_type(idx_type, "GatherElements' indices", [&](auto i) {
      using I = decltype(i);
      gather_elements_kernel<<<blocks_for(total), kThreads, 0, stream>>>(
          static_cast<const T*>(x), static_cast<const I*>(idx), static_cast<T*>(y), e, total);
    });
  });
  check_launch("GatherElements");
}

void scatter_elements(DType t, bool add, DType idx_type, const void* idx, const void* updates, void* out,
                      const ElementIndex& e, cudaStream_t stream) {
  const int64_t total = numel(e.walk);
  if (total == 0) return;
  with_index_type(idx_type, "ScatterElements' indices", [&](auto i) {
    using I = decltype(i);
    const I* ip = static_cast<const I*>(idx);
    if (!add)
      return with_bytes(int(dtype_size(t)), "ScatterElements", [&](auto v) {
        using T = decltype(v);
        scatter_elements_kernel<T, I, false><<<blocks_for(total), kThreads, 0, stream>>>(
            ip, static_cast<const T*>(updates), static_cast<T*>(out), e, total);
      });
    auto launch = [&](auto v) {
      using T = decltype(v);
      scatter_elements_kernel<T, I, true><<<blocks_for(total), kThreads, 0, stream>>>(
          ip, static_cast<const T*>(updates), static_cast<T*>(out), e, total);
    };
    if (t == DType::kFloat64)
      launch(double{});
    else if (!with_float_type(t, launch))
      unsupported_dtype("ScatterElements' addition", t);
  });
  check_launch("ScatterElements");
}

}  // namespace onnxtrain::kernels::cuda
