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

// Element i's 64 random bits under `seed`.
ONNXTRAIN_HOST_DEVICE uint64_t counter_bits(uint64_t seed, uint64_t i) { return splitmix64(seed ^ splitmix64(i)); }

// Dropout with `ratio` keeps element i when the top 24 bits of its hash, as a fraction, reach the ratio.
ONNXTRAIN_HOST_DEVICE uint32_t dropout_threshold(double ratio) { return uint32_t(ratio * double(1 << 24)); }
ONNXTRAIN_HOST_DEVICE bool dropout_keeps(uint64_t seed, uint64_t i, uint32_t threshold) {
  return uint32_t(counter_bits(seed, i) >> 40) >= threshold;
}

// Uniform in [0, 1) from the top 24 bits (a float's precision), and (0, 1] from the next 24.
ONNXTRAIN_HOST_DEVICE float unit_uniform(uint64_t bits) { return float(bits >> 40) * (1.f / 16777216.f); }
ONNXTRAIN_HOST_DEVICE float unit_uniform_open(uint64_t bits) {
  return float(((bits >> 16) & 0xFFFFFF) + 1) * (1.f / 16777216.f);
}

}  // namespace onnxtrain::kernels
