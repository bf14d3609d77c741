// Random cases for the emulated attention kernels (attention_emulated.h; random_cases.h): shapes, layouts, masks,
// biases and dropout drawn together. Included after attention_emulated.h.
#pragma once
#include <cstdio>
#include <string>

#include "random_cases.h"

namespace onnxtrain::kernels::cuda {
namespace {

// A case drawn from `d`, with heads of up to `max_head` elements (the tiled kernels'; the warp-per-row kernels'
// cases up to kMaxHead); `builds`: the tensor-core kernels' general build alone sometimes (the float32 kernels have
// one build). Rows and keys are at least 8, so that no case's gradients are all zero (then any rounding would exceed
// a tolerance relative to them).
inline Case random_case(testing::Draws& d, int64_t max_head, bool builds) {
  Case c;
  c.batch = 1 + d.below(2), c.heads = 1 + d.below(4);
  do c.groups = 1 + d.below(c.heads);
  while (c.heads % c.groups);
  c.tq = 8 + d.below(143);
  c.tk = d.one_in(4) ? c.tq : 8 + d.below(143);
  c.d = std::min(max_head, 8 * (1 + d.below(16)) - (d.one_in(3) ? d.below(7) : 0));  // (some not a multiple of 8)
  c.dv = d.one_in(2) ? c.d : 1 + d.below(max_head);
  c.causal = d.one_in(2), c.bias = d.one_in(2);
  c.causal_bias = c.bias && !c.causal && d.one_in(2);
  c.zero_below = c.bias && d.one_in(3);
  c.fill = d.one_in(2) ? -30.f : -INFINITY;
  c.dropout = d.one_in(3) ? 0.f : d.one_in(2) ? 0.1f : 0.3f;
  if (d.one_in(5)) c.masked_row = d.below(c.tq), c.zero_masked_rows = true, c.fill = -INFINITY;
  if (c.batch == 2 && d.one_in(4)) c.shift = d.below(70);
  c.scan_pairs = d.one_in(4);
  c.general = builds && d.one_in(4);
  c.sequence_major = d.one_in(2);
  if (c.sequence_major && d.one_in(3)) c.packed = true, c.tk = c.tq, c.dv = c.d;
  c.warp_rows = d.one_in(4);  // (with heads past the tiled kernels' half the time; fewer rows, slow to emulate)
  if (c.warp_rows) c.tq = 8 + c.tq % 33, c.tk = c.packed ? c.tq : 8 + c.tk % 33, c.masked_row %= c.tq;
  if (c.warp_rows && d.one_in(2)) {
    c.d = max_head + 1 + d.below(kMaxHead - max_head);
    c.dv = c.packed ? c.d : 1 + d.below(kMaxHead);
  }
  return c;
}

inline std::string describe(const Case& c) {
  char s[360];
  std::snprintf(s, sizeof s,
                "batch %ld, heads %ld, groups %ld, tq %ld, tk %ld, d %ld, dv %ld, causal %d, bias %d (causal %d, zero "
                "below %d), fill %g, dropout %g, masked row %ld, shift %ld, scan %d, general %d, sequence-major %d, "
                "packed %d, warp rows %d",
                long(c.batch), long(c.heads), long(c.groups), long(c.tq), long(c.tk), long(c.d), long(c.dv), c.causal,
                c.bias, c.causal_bias, c.zero_below, double(c.fill), double(c.dropout), long(c.masked_row),
                long(c.shift), c.scan_pairs, c.general, c.sequence_major, c.packed, c.warp_rows);
  return s;
}

// Runs random cases through Emulated<T>, 4 unless ONNXTRAIN_RANDOM_CASES says otherwise (random_cases.h).
template <typename T>
void check_random_cases(int64_t max_head, bool builds) {
  testing::for_random_seeds(4, [&](testing::Draws& d) {
    const Case c = random_case(d, max_head, builds);
    SCOPED_TRACE(describe(c));
    Emulated<T>(c).check();
  });
}

}  // namespace
}  // namespace onnxtrain::kernels::cuda
