// Dropout's counter-based draws (kernels/counter_random.h) on the host: sixteen places at a time with AVX-512 where
// the CPU has it, bit for bit the draw of each element.
#pragma once
#include <cstdint>

namespace onnxtrain::kernels {

// keep[k] = dropout_keeps(seed, i0 + k, threshold) for k < n.
void dropout_keeps_draw(uint64_t seed, uint64_t i0, int64_t n, uint32_t threshold, bool* keep);

}  // namespace onnxtrain::kernels
