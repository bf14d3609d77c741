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

// Dropout with `ratio` draws by blocks of 64 elements: block i / 64 takes a key, the low 32 of its 64 random bits;
// the places p and p + 8 of each 16 (p % 16 < 8) share a draw, mix32(key ^ p * golden), the lower place keeping where
// the draw's low 16 bits reach the ratio, the upper where its high 16 bits do. (A key is one hash for 64 elements and
// a draw one for two: a kernel that walks a block, as the fused attention walks 64 keys of a score row, draws an
// element with a few 32-bit operations; a thread of its products holds keys 8 apart.) mix32 is the lowbias32 integer
// hash (Chris Wellons' hash-prospector).
constexpr uint64_t kDropoutBlock = 64;
ONNXTRAIN_HOST_DEVICE uint32_t dropout_threshold(double ratio) { return uint32_t(ratio * 65536.0); }
ONNXTRAIN_HOST_DEVICE uint32_t dropout_key(uint64_t seed, uint64_t block) {
  return uint32_t(counter_bits(seed, block));
}
ONNXTRAIN_HOST_DEVICE uint32_t mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x21f0aaadu;
  x ^= x >> 15;
  x *= 0x735a2d97u;
  return x ^ (x >> 15);
}
// The draw of place `place` (i % 64) of the block with key `key`, shared with place ^ 8; which half is its.
ONNXTRAIN_HOST_DEVICE uint32_t dropout_draw(uint32_t key, uint32_t place) {
  return mix32(key ^ ((place & ~8u) * 0x9E3779B9u));
}
ONNXTRAIN_HOST_DEVICE bool dropout_half_keeps(uint32_t draw, bool upper, uint32_t threshold) {
  return (upper ? draw >> 16 : draw & 0xFFFFu) >= threshold;
}
ONNXTRAIN_HOST_DEVICE bool dropout_keeps_at(uint32_t key, uint32_t place, uint32_t threshold) {
  return dropout_half_keeps(dropout_draw(key, place), (place & 8u) != 0, threshold);
}
ONNXTRAIN_HOST_DEVICE bool dropout_keeps(uint64_t seed, uint64_t i, uint32_t threshold) {
  return dropout_keeps_at(dropout_key(seed, i / kDropoutBlock), uint32_t(i % kDropoutBlock), threshold);
}
// keep[k] = dropout_keeps(seed, i0 + k) for k < n, a key a block.
inline void dropout_keeps_run(uint64_t seed, uint64_t i0, int64_t n, uint32_t threshold, bool* keep) {
  for (int64_t k = 0; k < n;) {
    const uint32_t key = dropout_key(seed, (i0 + uint64_t(k)) / kDropoutBlock);
    int64_t end = k + int64_t(kDropoutBlock - (i0 + uint64_t(k)) % kDropoutBlock);
    if (end > n) end = n;
    for (; k < end; ++k) keep[k] = dropout_keeps_at(key, uint32_t((i0 + uint64_t(k)) % kDropoutBlock), threshold);
  }
}

// Uniform in [0, 1) from the top 24 bits (a float's precision), and (0, 1] from the next 24.
ONNXTRAIN_HOST_DEVICE float unit_uniform(uint64_t bits) { return float(bits >> 40) * (1.f / 16777216.f); }
ONNXTRAIN_HOST_DEVICE float unit_uniform_open(uint64_t bits) {
  return float(((bits >> 16) & 0xFFFFFF) + 1) * (1.f / 16777216.f);
}

}  // namespace onnxtrain::kernels
