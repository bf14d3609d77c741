// The float32 -> bfloat16 conversions (kernels/cpu/convert.h): from_f32 and round_to give, vectorised and on the path
// of a CPU without AVX-512, the bits of one scalar BFloat16 conversion for every float of a sweep of bit patterns
// (halfway cases, denormals, infinities, NaNs among them), round_to its value widened back.
#include "kernels/cpu/convert.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/cpu_features.h"

namespace onnxtrain::kernels {
namespace {

std::vector<float> patterns() {
  std::vector<float> x;
  for (uint64_t u = 0; u < (uint64_t(1) << 32); u += 0x10001) {  // every high half, with low halves around it
    for (uint32_t low : {0x0000u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) {
      const uint32_t bits = (uint32_t(u) & 0xffff0000u) | low;
      float f;
      std::memcpy(&f, &bits, 4);
      x.push_back(f);
    }
  }
  x.push_back(1.f);  // (not a multiple of 16: the scalar tail too)
  return x;
}

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

void check() {
  const std::vector<float> x = patterns();
  std::vector<BFloat16> y(x.size());
  std::vector<float> r = x;
  from_f32(x.data(), y.data(), int64_t(x.size()));
  round_to(DType::kBFloat16, r.data(), int64_t(r.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    const BFloat16 want(x[i]);
    ASSERT_EQ(y[i].bits, want.bits) << std::hex << bits_of(x[i]) << " on " << cpu::features().str();
    ASSERT_EQ(bits_of(r[i]), bits_of(float(want))) << std::hex << bits_of(x[i]) << " on " << cpu::features().str();
  }
}

TEST(Convert, Bf16RoundsAsOneScalarConversionOnEveryPath) {
  check();
  cpu::restrict_features(false, false);
  check();
  cpu::restrict_features(true, true);
}

}  // namespace
}  // namespace onnxtrain::kernels
