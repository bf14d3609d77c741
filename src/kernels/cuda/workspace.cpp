#include "kernels/cuda/workspace.h"

#include <cstdint>

namespace onnxtrain::kernels::cuda {
namespace {

constexpr int64_t kMiB = int64_t(1) << 20, kAlign = 256;

}  // namespace

Dim workspace_scratch(const Dim& outputs) {
  return Dim::min(Dim(32 * kMiB), Dim::max(Dim(kMiB), outputs * Dim(16))) + Dim(kAlign);
}

Dim product_scratch(const ops::Op&, ops::InferCtx& s) { return workspace_scratch(shape_numel(s.outputs()[0].shape)); }

Workspace workspace_in(const KernelCtx& c, size_t at, size_t bytes) {
  if (bytes <= size_t(kAlign)) return {};  // (none declared: the algorithms that need none)
  char* start = c.scratch_as<char>(at, bytes);
  const auto address = reinterpret_cast<uintptr_t>(start);
  const size_t skip = size_t((kAlign - int64_t(address % kAlign)) % kAlign);
  return {start + skip, bytes - size_t(kAlign)};
}

}  // namespace onnxtrain::kernels::cuda
