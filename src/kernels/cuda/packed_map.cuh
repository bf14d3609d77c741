// Flat elementwise passes 16 bytes at a time: each thread loads a pack of V elements of every input with one
// vector load, applies f to each, and stores the pack of outputs with one vector store (the elementwise kernels'
// pass over contiguous operands, where single 2-byte accesses leave much of the bandwidth unused). The n % V
// elements past the last whole pack go one each to the grid's first threads.
#pragma once
#include <cstdint>

#include "kernels/cuda/device_types.cuh"

namespace onnxtrain::kernels::cuda {

template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T at[V];
};

// Elements a pack holds for inputs of In and outputs of Out: 16 bytes of the wider.
template <typename In, typename Out>
constexpr int pack_lanes() {
  return int(16 / (sizeof(In) > sizeof(Out) ? sizeof(In) : sizeof(Out)));
}

// Whether p may be read or written a pack of `lanes` elements of T at a time.
template <typename T>
bool packs_align(const void* p, int lanes) {
  return !p || reinterpret_cast<uintptr_t>(p) % (sizeof(T) * size_t(lanes)) == 0;
}

// y[i] = f(a[i], b[i]) for i < n (b null: f(a[i], a[i])), V elements a thread at a time; a, b and y aligned to
// whole packs (packs_align).
template <int V, typename In, typename Out, typename F>
__global__ void packed_map_kernel(F f, const In* a, const In* b, Out* y, int64_t n) {
  const int64_t packs = n / V;
  ONNXTRAIN_GRID_LOOP(p, packs) {
    const Pack<In, V> x = reinterpret_cast<const Pack<In, V>*>(a)[p];
    const Pack<In, V> z = b ? reinterpret_cast<const Pack<In, V>*>(b)[p] : x;
    Pack<Out, V> r;
#pragma unroll
    for (int k = 0; k < V; ++k) r.at[k] = f(x.at[k], z.at[k]);
    reinterpret_cast<Pack<Out, V>*>(y)[p] = r;
  }
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, i = packs * V + t;
  if (t < V && i < n) y[i] = f(a[i], b ? b[i] : a[i]);
}

#ifdef __CUDACC__
// y[i] = f(a[i], b[i]) for i < n: packed_map_kernel's packs where a, b and y align to whole packs, else one element
// a thread (packs of one).
template <typename In, typename Out, typename F>
void packed_map(F f, const In* a, const In* b, Out* y, int64_t n, cudaStream_t stream) {
  constexpr int V = pack_lanes<In, Out>();
  if (packs_align<In>(a, V) && packs_align<In>(b, V) && packs_align<Out>(y, V))
    packed_map_kernel<V><<<blocks_for((n + V - 1) / V), kThreads, 0, stream>>>(f, a, b, y, n);
  else
    packed_map_kernel<1><<<blocks_for(n), kThreads, 0, stream>>>(f, a, b, y, n);
}
#endif

}  // namespace onnxtrain::kernels::cuda
