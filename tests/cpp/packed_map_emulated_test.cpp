// The elementwise kernels' packed path (kernels/cuda/packed_map.cuh) run on the host through the warp emulation:
// every element of lengths below, at and past whole packs written once with f of its operands, for packs of 4 and
// of 8 elements, one operand or two, and an output narrower than the input; and which pointers align to packs.
#ifdef ONNXTRAIN_WITH_CUDA
#include "warp_emulation.h"  // first: the CUDA qualifiers for the host compiler
#include "kernels/cuda/packed_map.cuh"

#include <gtest/gtest.h>

#include <vector>

namespace onnxtrain::kernels::cuda {
namespace {

struct PlusTwice {  // x + 2 y, in the output's type
  template <typename In>
  float operator()(In x, In y) const {
    return float(x) + 2.f * float(y);
  }
};
struct Narrowed {  // the low 16 bits of x's integer part
  uint16_t operator()(float x, float) const { return uint16_t(int(x) & 0xffff); }
};

template <typename In, typename Out, typename F>
void expect_each_element_once(F f, bool two) {
  constexpr int V = pack_lanes<In, Out>();
  for (int64_t n : {0, 1, V - 1, V, V + 1, 1000, 1003}) {
    std::vector<In> a(size_t(n) + 1), b(size_t(n) + 1);
    for (int64_t i = 0; i < n; ++i) a[size_t(i)] = In(i % 251), b[size_t(i)] = In(i % 7);
    std::vector<Out> y(size_t(n) + 1, Out(77));  // (the one past the end stays)
    ASSERT_TRUE(packs_align<In>(a.data(), V) && packs_align<Out>(y.data(), V));
    const unsigned blocks = blocks_for((n + V - 1) / V);
    testing::emulate(blocks, kThreads, [&] {
      packed_map_kernel<V>(f, a.data(), two ? b.data() : static_cast<const In*>(nullptr), y.data(), n);
    });
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(y[size_t(i)], Out(f(a[size_t(i)], two ? b[size_t(i)] : a[size_t(i)]))) << n << " elements, at " << i;
    EXPECT_EQ(y[size_t(n)], Out(77)) << n;
  }
}

TEST(PackedMap, EveryElementIsWrittenOnceWithItsOperands) {
  expect_each_element_once<float, float>(PlusTwice{}, true);      // packs of 4
  expect_each_element_once<float, float>(PlusTwice{}, false);     // one operand
  expect_each_element_once<uint16_t, float>(PlusTwice{}, true);   // packs of 4 (the wider type's)
  expect_each_element_once<uint16_t, uint16_t>(PlusTwice{}, true);  // packs of 8
  expect_each_element_once<float, uint16_t>(Narrowed{}, false);
}

TEST(PackedMap, OnlyPointersAlignedToWholePacksTakeIt) {
  alignas(16) float data[8] = {};
  EXPECT_TRUE(packs_align<float>(data, 4));
  EXPECT_FALSE(packs_align<float>(data + 1, 4));
  EXPECT_TRUE(packs_align<float>(data + 1, 1));
  EXPECT_TRUE(packs_align<float>(nullptr, 4));  // (an operand not there)
  EXPECT_EQ((pack_lanes<uint16_t, uint16_t>()), 8);
  EXPECT_EQ((pack_lanes<float, uint16_t>()), 4);
}

}  // namespace
}  // namespace onnxtrain::kernels::cuda
#endif
