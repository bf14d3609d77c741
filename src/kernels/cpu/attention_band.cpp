#include "kernels/cpu/attention_band.h"

#include <algorithm>
#include <cstring>

namespace onnxtrain::kernels {

AttentionBand open_band(const bool* cond, int64_t rs, int64_t r0, int64_t r1, int64_t n) {
  AttentionBand band{n, 0, true};
  for (int64_t r = r0; r < (rs ? r1 : r0 + 1); ++r) {
    const bool* row = cond + r * rs;
    auto* first = static_cast<const bool*>(std::memchr(row, 0, size_t(n)));
    if (!first) {
      band.every_row_open = false;
      continue;
    }
    band.lo = std::min(band.lo, int64_t(first - row));
    int64_t last = n - 1;
    while (row[last]) --last;
    band.hi = std::max(band.hi, last + 1);
  }
  return band;
}

}  // namespace onnxtrain::kernels
