#include "memory/budget.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <numeric>

#include "onnxtrain/error.h"

namespace onnxtrain {

static bool parse_number(const std::string& text, double* out) {
  try {
    size_t used = 0;
    *out = std::stod(text, &used);
    return used == text.size() && *out > 0;
  } catch (const std::exception&) {
    return false;
  }
}

int64_t parse_size(const std::string& text, const std::string& what) {
  static const std::pair<const char*, int64_t> units[] = {
      {"GiB", 1LL << 30}, {"MiB", 1LL << 20}, {"KiB", 1LL << 10}, {"B", 1}};
  double v = 0;
  for (auto& [suffix, scale] : units) {
    std::string s(suffix);
    if (text.size() > s.size() && text.compare(text.size() - s.size(), s.size(), s) == 0) {
      if (parse_number(text.substr(0, text.size() - s.size()), &v) && v * double(scale) < 0x1p63)
        return int64_t(v * double(scale));
      break;
    }
  }
  if (text.find_first_not_of("0123456789") == std::string::npos && parse_number(text, &v) && v < 0x1p63)
    return int64_t(v);
  throw InputError(what + ": '" + text + "' is not a size such as 6GiB, 512MiB, 100KiB or a number of bytes");
}

}  // namespace onnxtrain

namespace onnxtrain::memory {

std::string mib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MiB", double(bytes) / 1048576.0);
  return buf;
}

Budget parse_budget(const std::string& text) {
  Budget b;
  if (text.empty()) return b;
  double v = 0;
  bool has_unit = text.find_first_of("BKMG") != std::string::npos;
  if (!has_unit && parse_number(text, &v) && v <= 1) {
    b.stash_fraction = v;
    return b;
  }
  try {
    if (has_unit) {
      b.peak_bytes = parse_size(text, "memory budget");
      return b;
    }
  } catch (const InputError&) {
  }
  throw ConfigError("memory budget '" + text +
                    "': give a fraction of the stash in (0, 1] such as 0.3, or a size for "
                    "the step's peak such as 6GiB or 512MiB");
}

std::string Budget::str() const {
  if (peak_bytes) return mib(peak_bytes) + " for the step's peak";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g%% of the stash", stash_fraction * 100);
  return buf;
}

Choice choose_cheapest(const std::vector<Item>& items, int64_t need) {
  Choice r;
  // Exact in units of the sizes' gcd; past kMaxUnits units, in coarser ones with sizes rounded down (the choice
  // then saves at least `need` still, perhaps a little more than the least would).
  constexpr int64_t kMaxUnits = 1 << 16;
  int64_t unit = 0;
  for (auto& it : items) unit = std::gcd(unit, it.bytes);
  unit = std::max({unit, int64_t(1), (std::max<int64_t>(need, 0) + kMaxUnits - 1) / kMaxUnits});
  const int64_t cap = (std::max<int64_t>(need, 0) + unit - 1) / unit;  // units to save, at least
  // dp[u]: least cost saving at least u units (states above cap are capped); take[i][u]: item i used there.
  const int64_t kInf = INT64_MAX / 4;
  std::vector<int64_t> dp(size_t(cap) + 1, kInf);
  dp[0] = 0;
  std::vector<std::vector<bool>> take(items.size(), std::vector<bool>(size_t(cap) + 1, false));
  for (size_t i = 0; i < items.size(); ++i) {
    int64_t w = items[i].bytes / unit, cost = items[i].cost;
    if (w == 0) continue;
    for (int64_t u = cap; u >= 0; --u) {
      int64_t from = std::max<int64_t>(0, u - w);
      if (dp[size_t(from)] < kInf && dp[size_t(from)] + cost < dp[size_t(u)]) {
        dp[size_t(u)] = dp[size_t(from)] + cost;
        take[i][size_t(u)] = true;
      }
    }
  }
  if (dp[size_t(cap)] >= kInf) {  // cannot meet it: everything
    for (size_t i = 0; i < items.size(); ++i) r.chosen.push_back(i), r.saved += items[i].bytes;
    return r;
  }
  int64_t u = cap;
  for (size_t i = items.size(); i-- > 0 && u > 0;)
    if (take[i][size_t(u)]) {
      r.chosen.push_back(i);
      r.saved += items[i].bytes;
      u = std::max<int64_t>(0, u - items[i].bytes / unit);
    }
  std::reverse(r.chosen.begin(), r.chosen.end());
  r.met = true;
  return r;
}

}  // namespace onnxtrain::memory
