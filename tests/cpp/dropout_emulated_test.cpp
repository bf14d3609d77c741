// Dropout's kernels (kernels/cuda/dropout_kernels.cuh) run on the host through the warp emulation: the packed kernel
// (16 elements a thread, a key of the draw a pack) draws the mask the counter-based draw gives each element
// (dropout_keeps, the CPU's), and writes the output and the residual's sum as the kernel of an element a thread does;
// for lengths below, at and past whole packs, bf16 in with a float32 residual out (GPT-2's fused residual dropouts)
// and float32 in with bf16 out (their gradients), and the mask left alone where none is asked for.
#ifdef ONNXTRAIN_WITH_CUDA
#include "warp_emulation.h"  // first: the CUDA qualifiers for the host compiler
#include "kernels/cuda/dropout_kernels.cuh"

#include <gtest/gtest.h>

#include <cstring>

namespace onnxtrain::kernels::cuda {
namespace {

using testing::Aligned;

constexpr uint64_t kSeed = 0x5eed;
constexpr float kRatio = 0.25f;

template <typename In, typename Out>
void check_packs(int64_t n, bool residual, bool with_mask) {
  const uint32_t threshold = dropout_threshold(kRatio);
  const float scale = 1.f / (1.f - kRatio);
  Aligned<In> x(n);
  Aligned<Out> r(n), packed(n), single(n);
  Aligned<bool> mask(n), mask_single(n);
  for (int64_t i = 0; i < n; ++i) {
    x.p[i] = from_float<In>(float(i % 97) / 13.f - 3.f);
    r.p[i] = from_float<Out>(float(i % 31) / 7.f);
  }
  for (Aligned<Out>* y : {&packed, &single}) std::fill(y->p, y->p + y->size, from_float<Out>(77.f));
  std::memset(mask.p, 2, size_t(mask.size));
  const Out* rp = residual ? r.p : nullptr;
  bool* mp = with_mask ? mask.p : nullptr;
  ASSERT_TRUE(packs_align<In>(x.p, kDropoutPack) && packs_align<Out>(packed.p, kDropoutPack));
  testing::emulate(blocks_for((n + kDropoutPack - 1) / kDropoutPack), kThreads, [&] {
    dropout_packs_kernel<In, Out>(x.p, rp, packed.p, mp, n, kSeed, threshold, scale);
  });
  testing::emulate(blocks_for(n), kThreads, [&] {
    dropout_kernel<In, Out>(x.p, rp, single.p, mask_single.p, n, kSeed, threshold, scale);
  });
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    const bool keep = dropout_keeps(kSeed, uint64_t(i), threshold);
    kept += keep;
    ASSERT_EQ(mask_single.p[i], keep) << i;
    if (with_mask) {
      ASSERT_EQ(int(mask.p[i]), int(keep)) << n << " elements, at " << i;
    }
    ASSERT_EQ(to_float(packed.p[i]), to_float(single.p[i])) << n << " elements, at " << i;
  }
  EXPECT_EQ(to_float(packed.p[n]), 77.f) << n;
  if (!with_mask) {
    for (int64_t i = 0; i < mask.size; ++i) ASSERT_EQ(int(reinterpret_cast<unsigned char*>(mask.p)[i]), 2) << i;
  }
  if (n >= 1000) {
    EXPECT_NEAR(double(kept) / double(n), 1.0 - kRatio, 0.05) << n;
  }
}

TEST(DropoutKernels, PacksDrawTheMaskOfEachElementAndComputeAsOneElementAThread) {
  for (int64_t n : {int64_t(0), int64_t(1), int64_t(15), int64_t(16), int64_t(17), int64_t(64), int64_t(1000),
                    int64_t(3 * 4096 + 5)}) {
    check_packs<__nv_bfloat16, float>(n, true, true);
    check_packs<float, __nv_bfloat16>(n, false, false);
    check_packs<float, float>(n, true, false);
  }
}

}  // namespace
}  // namespace onnxtrain::kernels::cuda
#endif
