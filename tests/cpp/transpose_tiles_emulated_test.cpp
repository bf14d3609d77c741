// The strided copy's transposes by tiles (kernels/cuda/transpose_tiles.cuh) run on the host through the warp
// emulation: which copies take tiles, and that a tiled copy writes every element where the copy as given does (the
// last two dims swapped, as K^T; a permutation whose source-contiguous dim is not next to the last, with partial
// tiles and a batch of dims on either side of it).
#ifdef ONNXTRAIN_WITH_CUDA
#include "warp_emulation.h"  // first: the CUDA qualifiers for the host compiler
#include "kernels/cuda/transpose_tiles.cuh"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace onnxtrain::kernels::cuda {
namespace {

// The copy of a contiguous source of dims `in` into its permutation `perm`, as strided_copy's Indexing.
Indexing permuted(const std::vector<int64_t>& in, const std::vector<int>& perm) {
  std::vector<int64_t> in_strides(in.size(), 1);
  for (int d = int(in.size()) - 2; d >= 0; --d) in_strides[size_t(d)] = in_strides[size_t(d) + 1] * in[size_t(d) + 1];
  Indexing ix;
  ix.rank = int(perm.size());
  int64_t stride = 1;
  for (int d = ix.rank - 1; d >= 0; --d) {
    ix.dims[d] = in[size_t(perm[size_t(d)])];
    ix.strides[0][d] = stride;
    ix.strides[1][d] = in_strides[size_t(perm[size_t(d)])];
    stride *= ix.dims[d];
  }
  return ix;
}

TEST(TransposeTiles, TransposingCopiesAreTiledAndOthersAreNot) {
  TransposeTiles t;
  EXPECT_TRUE(transpose_tiles(permuted({192, 1024, 64}, {0, 2, 1}), t));  // K^T of GPT-2's heads: (192, 64, 1024)
  EXPECT_EQ(t.rows, 64);
  EXPECT_EQ(t.cols, 1024);
  EXPECT_EQ(t.dst_row, 1024);
  EXPECT_EQ(t.src_col, 64);
  EXPECT_EQ(t.blocks(), 192 * 2 * 32);
  EXPECT_FALSE(transpose_tiles(permuted({16, 1024, 12, 64}, {0, 2, 1, 3}), t));  // the last dim kept: widened instead
  EXPECT_FALSE(transpose_tiles(permuted({4, 300, 3}, {0, 2, 1}), t));            // 3 rows of a tile's 32
  Indexing broadcast = permuted({64, 64}, {1, 0});
  broadcast.strides[1][1] = 0;  // (Expand: no dim of the source contiguous)
  broadcast.strides[1][0] = 0;
  EXPECT_FALSE(transpose_tiles(broadcast, t));
}

TEST(TransposeTiles, EveryElementLandsWhereTheCopyAsGivenPutsIt) {
  for (const auto& [in, perm] : {std::pair<std::vector<int64_t>, std::vector<int>>{{3, 37, 45}, {0, 2, 1}},
                                 {{2, 5, 33, 40}, {0, 3, 1, 2}}}) {
    const Indexing ix = permuted(in, perm);
    TransposeTiles t;
    ASSERT_TRUE(transpose_tiles(ix, t));
    const int64_t n = std::accumulate(in.begin(), in.end(), int64_t(1), std::multiplies<int64_t>());
    std::vector<uint16_t> src(static_cast<size_t>(n)), got(src.size(), 0xffff), want(src.size());
    std::iota(src.begin(), src.end(), uint16_t(0));
    for (int64_t i = 0; i < n; ++i) {  // the copy as given: output index i's offsets in both arrays
      int64_t rest = i, dst_at = 0, src_at = 0;
      for (int d = ix.rank - 1; d >= 0; --d) {
        const int64_t c = rest % ix.dims[d];
        rest /= ix.dims[d];
        dst_at += c * ix.strides[0][d];
        src_at += c * ix.strides[1][d];
      }
      want[size_t(dst_at)] = src[size_t(src_at)];
    }
    testing::emulate(unsigned(t.blocks()), kTransposeThreads,
                     [&] { transpose_tiles_kernel<uint16_t>(src.data(), got.data(), t); });
    EXPECT_EQ(got, want) << "dims " << in.size();
  }
}

}  // namespace
}  // namespace onnxtrain::kernels::cuda
#endif
