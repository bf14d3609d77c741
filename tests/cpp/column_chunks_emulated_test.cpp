// Column sums over chunks of rows (kernels/cuda/column_chunks.cuh, behind the reductions over leading dims and, with
// chunk_span() and write_partial(), the norms' dscale and dbias) run on the host through the warp emulation:
// column_partials_kernel then sum_chunks_kernel against sums in float64, for no rows, one chunk, a last chunk
// shorter than the others, and more rows than kRowChunks chunks of kRowsPerChunk hold; columns past a block's 32; and
// the wide kernel of 16-bit columns against the one of a column a thread.
#ifdef ONNXTRAIN_WITH_CUDA
#include "warp_emulation.h"  // first: the CUDA qualifiers for the host compiler
#include "kernels/cuda/column_chunks.cuh"

#include <gtest/gtest.h>

#include <vector>

namespace onnxtrain::kernels::cuda {
namespace {

TEST(ColumnChunks, ColumnsAreSummedOverEveryRowOnce) {
  for (const auto& shape : {std::pair<int64_t, int64_t>{0, 5}, {7, 33}, {300, 40}, {20000, 3}}) {
    const int64_t rows = shape.first, n = shape.second;  // (not bindings: lambdas below capture them)
    std::vector<float> x(size_t(rows * n));
    for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i * 2654435761u % 1000) - 500) / 256.f;  // exact sums
    const Chunks ch = chunks_of(rows);
    EXPECT_LE(ch.count, kRowChunks);
    EXPECT_GE(int64_t(ch.count) * ch.rows, rows);
    std::vector<float> partial(size_t(kRowChunks * n), 1e30f), out(size_t(n), 1e30f);
    const dim3 grid = chunk_grid(n, ch);
    testing::emulate(EmulatedIndex{grid.x, grid.y, 1}, kThreads,
                     [&] { column_partials_kernel<float>(x.data(), partial.data(), rows, n, ch.rows); });
    testing::emulate(1, kThreads, [&] { sum_chunks_kernel<float>(partial.data(), ch.count, n, 1.f, out.data()); });
    for (int64_t j = 0; j < n; ++j) {
      double want = 0;
      for (int64_t r = 0; r < rows; ++r) want += x[size_t(r * n + j)];
      ASSERT_EQ(double(out[size_t(j)]), want) << rows << " rows, column " << j;
    }
  }
}

// The wide kernel (8 columns of a 16-bit x a thread) gives the bits of the one of a column a thread, columns past a
// block's 256 and a last chunk shorter than the others among them.
TEST(ColumnChunks, SixteenBitColumnsReadSixteenBytesAtATimeSumAsOneAtATime) {
  for (const auto& shape : {std::pair<int64_t, int64_t>{1, 8}, {300, 264}, {20000, 16}}) {
    const int64_t rows = shape.first, n = shape.second;
    std::vector<__nv_bfloat16> x(size_t(rows * n));
    for (size_t i = 0; i < x.size(); ++i) x[i] = from_float<__nv_bfloat16>(float(int(i * 2654435761u % 977)) / 61.f);
    const Chunks ch = chunks_of(rows);
    std::vector<float> one(size_t(kRowChunks * n), 1e30f), wide(size_t(kRowChunks * n), 2e30f);
    dim3 grid = chunk_grid(n, ch);
    testing::emulate(EmulatedIndex{grid.x, grid.y, 1}, kThreads,
                     [&] { column_partials_kernel(x.data(), one.data(), rows, n, ch.rows); });
    grid = wide_chunk_grid(n, ch);
    testing::emulate(EmulatedIndex{grid.x, grid.y, 1}, kThreads,
                     [&] { column_partials_wide_kernel(x.data(), wide.data(), rows, n, ch.rows); });
    for (int64_t i = 0; i < int64_t(ch.count) * n; ++i)
      ASSERT_EQ(wide[size_t(i)], one[size_t(i)]) << rows << " rows, partial " << i;
  }
}

}  // namespace
}  // namespace onnxtrain::kernels::cuda
#endif
