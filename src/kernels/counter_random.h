// Counter-based random numbers: element i of a random op draws hash(seed, i), so a rerun with the same seed (a
// recomputed clone, a fused kernel, a gradient kernel) draws bit-identical numbers whatever the threading, and on
// whichever device: the same functions compile for the host and for CUDA kernels.
#pragma once
#include <cstdint>

#include "core/host_device.h"

namespace onnxtrain::kernels {

ONNXTRAIN_HOST_DEVICE uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Dropout with `ratio` keeps element i when the top 24 bits of its hash, as a fraction, reach the ratio.
ONNXTRAIN_HOST_DEVICE uint32_t dropout_threshold(double ratio) { return uint32_t(ratio * double(1 << 24)); }
ONNXTRAIN_HOST_DEVICE bool dropout_keeps(uint64_t seed, uint64_t i, uint32_t threshold) {
  return uint32_t(splitmix64(seed ^ splitmix64(i)) >> 40) >= threshold;
}

}  // namespace onnxtrain::kernels
