// Attention under a boolean mask (true: masked), read a tile of query rows at a time: the band of key columns
// outside which every row of the tile is masked, so a kernel can skip the scores there.
#pragma once
#include <cstdint>

namespace onnxtrain::kernels {

struct AttentionBand {
  int64_t lo, hi;       // [lo, hi): the columns some row of the tile leaves open (lo >= hi: none)
  bool every_row_open;  // whether each row of the tile has an open column
};

// Rows [r0, r1) of a (rows, n) mask with row stride rs (0: one row for all) and unit column stride.
AttentionBand open_band(const bool* cond, int64_t rs, int64_t r0, int64_t r1, int64_t n);

}  // namespace onnxtrain::kernels
