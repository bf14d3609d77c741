#include "kernels/cuda/indexing.h"

#include "onnxtrain/error.h"

namespace onnxtrain::kernels::cuda {

Indexing indexing(const KernelCtx& c, const std::vector<int64_t>& dims,
                  std::initializer_list<std::vector<int64_t>> strides) {
  if (dims.size() > size_t(kMaxRank))
    throw UnsupportedError(c.node.where() + ": the CUDA kernels take at most " + std::to_string(kMaxRank) +
                           " dims, not " + std::to_string(dims.size()));
  Indexing ix;
  ix.rank = int(dims.size());
  for (size_t d = 0; d < dims.size(); ++d) ix.dims[d] = dims[d];
  int k = 0;
  for (const auto& st : strides) {
    for (size_t d = 0; d < dims.size(); ++d) ix.strides[k][d] = st[d];
    ++k;
  }
  return coalesced(ix);
}

Indexing coalesced(const Indexing& ix) {
  Indexing r;
  for (int d = 0; d < ix.rank; ++d) {
    if (ix.dims[d] == 1) continue;
    const int last = r.rank - 1;
    bool merges = last >= 0;
    for (int k = 0; k < 3 && merges; ++k) merges = r.strides[k][last] == ix.strides[k][d] * ix.dims[d];
    const int at = merges ? last : r.rank++;
    r.dims[at] = merges ? r.dims[at] * ix.dims[d] : ix.dims[d];
    for (int k = 0; k < 3; ++k) r.strides[k][at] = ix.strides[k][d];
  }
  return r;
}

int widen_contiguous_runs(Indexing& ix, int elem_bytes, const void* dst, const void* src) {
  const int last = ix.rank - 1;
  if (last < 0 || ix.strides[0][last] != 1 || ix.strides[1][last] != 1) return elem_bytes;
  for (int wide = 16; wide > elem_bytes; wide /= 2) {
    const int64_t k = wide / elem_bytes;
    bool fits = ix.dims[last] % k == 0 && reinterpret_cast<uintptr_t>(dst) % uintptr_t(wide) == 0 &&
                reinterpret_cast<uintptr_t>(src) % uintptr_t(wide) == 0;
    for (int d = 0; d < last && fits; ++d) fits = ix.strides[0][d] % k == 0 && ix.strides[1][d] % k == 0;
    if (!fits) continue;
    ix.dims[last] /= k;
    for (int d = 0; d < last; ++d) ix.strides[0][d] /= k, ix.strides[1][d] /= k;
    return wide;
  }
  return elem_bytes;
}

void same_dtype(const KernelCtx& c, const Tensor& x, size_t first, size_t last) {
  for (size_t i = first; i <= last; ++i)
    if (c.has(i) && c.in(i).dtype() != x.dtype())
      throw UnsupportedError(c.node.where() + ": the CUDA kernel takes input " + std::to_string(i) + " in " +
                             dtype_name(x.dtype()) + " (the input's dtype), not " + dtype_name(c.in(i).dtype()));
}

void copy(const Tensor& from, Tensor& to) {
  if (to.raw() != from.raw()) copy_bytes(from.raw(), to.raw(), from.nbytes());
}

void copy_bytes(const void* from, void* to, size_t bytes) {
  if (bytes) check(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, stream()), "cudaMemcpyAsync");
}

void zero(void* dst, size_t bytes) {
  if (bytes) check(cudaMemsetAsync(dst, 0, bytes, stream()), "cudaMemsetAsync");
}

}  // namespace onnxtrain::kernels::cuda
