// Counter-based random numbers: element i of a random op draws hash(seed, i), so a rerun with the same seed (a
// recomputed clone, a fused kernel, a gradient kernel) draws bit-identical numbers whatever the threading.
#pragma once
#include <cstdint>

namespace onnxtrain::kernels {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Dropout with `ratio` keeps element i when the top 24 bits of its hash, as a fraction, reach the ratio.
inline uint32_t dropout_threshold(double ratio) { return uint32_t(ratio * double(1 << 24)); }
inline bool dropout_keeps(uint64_t seed, uint64_t i, uint32_t threshold) {
  return uint32_t(splitmix64(seed ^ splitmix64(i)) >> 40) >= threshold;
}

}  // namespace onnxtrain::kernels
