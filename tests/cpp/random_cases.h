// Random cases for the emulated kernels' tests: a test draws each case from a seed, so that the combinations its
// named cases leave out get tried too. ONNXTRAIN_RANDOM_CASES sets how many cases a test runs (its default, CI's,
// otherwise; say 200 before a GPU run) and ONNXTRAIN_RANDOM_SEED the first case's seed (1 by default): a run is
// repeatable, and a failure names its seed.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>

namespace onnxtrain::testing {

// A case's draws, from its seed.
struct Draws {
  explicit Draws(uint32_t seed) : g(seed) {}
  int64_t below(int64_t n) { return int64_t(g() % uint32_t(n)); }  // 0 .. n - 1
  bool one_in(int64_t n) { return below(n) == 0; }
  std::mt19937 g;
};

// Calls check(draws) with each case's draws, under a trace naming its seed, until one fails.
template <typename Check>
void for_random_seeds(int64_t default_count, Check&& check) {
  auto number = [](const char* name, int64_t otherwise) {
    const char* v = std::getenv(name);
    return v && *v ? int64_t(std::strtoll(v, nullptr, 10)) : otherwise;
  };
  const int64_t count = number("ONNXTRAIN_RANDOM_CASES", default_count);
  const auto first = uint32_t(number("ONNXTRAIN_RANDOM_SEED", 1));
  for (int64_t i = 0; i < count && !::testing::Test::HasFailure(); ++i) {
    const uint32_t seed = first + uint32_t(i);
    SCOPED_TRACE("random case of seed " + std::to_string(seed));
    Draws draws(seed);
    check(draws);
  }
}

}  // namespace onnxtrain::testing
