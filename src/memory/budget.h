// Memory budgets of the memory optimizer: a fraction of the stash ("0.3") or a
// byte size for the whole step's predicted peak ("6GiB"), and the exact knapsack
// that picks the cheapest recompute plans saving enough.
#pragma once
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "onnxtrain/memory_prediction.h"


namespace onnxtrain::memory {

// "12.34 MiB": how reports print sizes.
std::string mib(int64_t bytes);

struct Budget {
  double stash_fraction = 0;  // keep at most this fraction of the stash (0 < f <= 1), or
  int64_t peak_bytes = 0;     // fit the whole step's predicted peak in this many bytes
  bool empty() const { return stash_fraction == 0 && peak_bytes == 0; }
  std::string str() const;  // "50% of the stash", "6.00 GiB for the step's peak"
};
// "" (none), a fraction in (0, 1] ("0.3"), or a size ("6GiB"); anything else is a ConfigError quoting it.
Budget parse_budget(const std::string& text);

// One recompute plan as the knapsack sees it, for concrete dims.
struct Item {
  int64_t bytes = 0;  // stash bytes it saves
  int64_t cost = 0;   // recompute cost (see Candidate::cost)
};
struct Choice {
  std::vector<size_t> chosen;  // indices into the items, ascending
  int64_t saved = 0;
  bool met = false;  // false: even every item saves less than `need`
};
// The subset saving at least `need` bytes at the least total cost (exact in units of the gcd of the sizes, or
// of need / 65536 when coarser); when none does, every item.
Choice choose_cheapest(const std::vector<Item>& items, int64_t need);

}  // namespace onnxtrain::memory
