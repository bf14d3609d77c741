// Data-parallel loops over both cores (OpenMP), serial below a grain size.
#pragma once
#include <cstdint>

namespace onnxtrain {

// Calls fn(begin, end) over [0, n) in chunks; runs serially when n*cost_per_item is small.
template <typename F>
void parallel_for(int64_t n, int64_t cost_per_item, F fn) {
  constexpr int64_t kSerialWork = 1 << 15;
  if (n <= 1 || n * cost_per_item < kSerialWork) {
    if (n > 0) fn(int64_t(0), n);
    return;
  }
  int64_t chunks = 64 < n ? 64 : n;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) fn(n * c / chunks, n * (c + 1) / chunks);
}

}  // namespace onnxtrain
