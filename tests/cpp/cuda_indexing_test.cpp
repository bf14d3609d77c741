// The elementwise kernels' index walk, compiled by the host compiler: indexing.h's coalescing of a shape and its
// arrays' strides, and device_types.cuh's offsets() of each flat index (32-bit divisions where they fit), against a
// plain decomposition of the index over the shape as given; strided_copy's grouping of contiguous runs into wider
// elements, against the copy as given.
#ifdef ONNXTRAIN_WITH_CUDA
#include "warp_emulation.h"  // first: the CUDA qualifiers for the host compiler
#include "kernels/cuda/device_types.cuh"
#include "kernels/cuda/indexing.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace onnxtrain::kernels::cuda {
namespace {

Indexing make(const std::vector<int64_t>& dims, const std::vector<std::vector<int64_t>>& strides) {
  Indexing ix;
  ix.rank = int(dims.size());
  for (size_t d = 0; d < dims.size(); ++d) {
    ix.dims[d] = dims[d];
    for (size_t k = 0; k < strides.size(); ++k) ix.strides[k][d] = strides[k][d];
  }
  return ix;
}

// Element i's offset in array k, by the shape as given.
int64_t reference(const Indexing& ix, int k, int64_t i) {
  int64_t at = 0;
  for (int d = ix.rank - 1; d >= 0; --d) {
    at += i % ix.dims[d] * ix.strides[k][d];
    i /= ix.dims[d];
  }
  return at;
}

void expect_same_offsets(const Indexing& given, int64_t i) {
  const Offsets<3> o = offsets<3>(coalesced(given), i);
  for (int k = 0; k < 3; ++k) ASSERT_EQ(o.at[k], reference(given, k, i)) << "array " << k << ", index " << i;
}

TEST(CudaIndexing, ArraysOfOneShapeNeedNoDivisionAndABroadcastRowOne) {
  const Indexing same = coalesced(make({2, 3, 4}, {{12, 4, 1}, {12, 4, 1}}));
  EXPECT_EQ(same.rank, 1);
  EXPECT_EQ(same.dims[0], 24);
  EXPECT_EQ(same.strides[0][0], 1);
  EXPECT_EQ(same.strides[1][0], 1);

  const Indexing bias = coalesced(make({2, 3, 4}, {{12, 4, 1}, {0, 0, 1}}));  // a row added down [6, 4]
  ASSERT_EQ(bias.rank, 2);
  EXPECT_EQ(bias.dims[0], 6);
  EXPECT_EQ(bias.dims[1], 4);
  EXPECT_EQ(bias.strides[0][0], 4);
  EXPECT_EQ(bias.strides[1][0], 0);
  EXPECT_EQ(bias.strides[1][1], 1);

  EXPECT_EQ(coalesced(make({1, 1}, {{0, 0}})).rank, 0);  // a scalar's one element
  EXPECT_EQ(coalesced(make({2, 1, 3}, {{3, 3, 1}})).rank, 1);  // a dim of 1 between contiguous ones
  EXPECT_EQ(coalesced(make({2, 3, 4}, {{12, 4, 1}, {12, 1, 3}})).rank, 3);  // a transpose keeps its dims
  EXPECT_EQ(coalesced(make({2, 3, 4}, {{12, 4, 1}, {0, 1, 0}})).rank, 3);  // a column broadcast both ways
}

TEST(CudaIndexing, EveryIndexHasTheOffsetsOfTheShapeAsGiven) {
  uint32_t seed = 7;
  auto next = [&](uint32_t n) {
    seed = seed * 1664525u + 1013904223u;
    return (seed >> 8) % n;
  };
  for (int round = 0; round < 300; ++round) {
    const int rank = int(next(kMaxRank + 1));
    std::vector<int64_t> dims(static_cast<size_t>(rank));
    for (auto& n : dims) n = 1 + next(4);
    std::vector<std::vector<int64_t>> strides(3, std::vector<int64_t>(size_t(rank)));
    for (auto& st : strides) {
      const uint32_t kind = next(4);  // contiguous, broadcast on some dims, padded rows, reversed dim order
      int64_t step = 1;
      for (int d = rank - 1; d >= 0; --d) {
        const int64_t at = kind == 3 ? rank - 1 - d : d;
        st[size_t(at)] = kind == 1 && next(2) ? 0 : step;
        step *= dims[size_t(at)] + (kind == 2 && d == rank - 1 ? 3 : 0);
      }
    }
    const Indexing given = make(dims, strides);
    int64_t n = 1;
    for (int64_t v : dims) n *= v;
    for (int64_t i = 0; i < n; ++i) expect_same_offsets(given, i);
  }
}

TEST(CudaIndexing, IndicesPast32BitsDivideIn64) {
  const int64_t big = (int64_t(1) << 31) + 11;  // no two dims merge: a row broadcast, then a column
  const Indexing given = make({3, big, 5}, {{0, 5, 1}, {big * 5, 0, 1}, {1, 3, 0}});
  ASSERT_EQ(coalesced(given).rank, 3);
  for (int64_t i : {int64_t(0), int64_t(4), (int64_t(1) << 32) - 1, int64_t(1) << 32, (int64_t(1) << 32) + 7,
                    big * 5 - 1, big * 5, big * 5 * 2 + 123457, big * 5 * 3 - 1})
    expect_same_offsets(given, i);
}

// strided_copy's walk on the host: `bytes`-byte elements of src at their offsets by ix copied to dst at theirs.
void copy_by(const Indexing& ix, int bytes, const char* src, char* dst) {
  int64_t n = 1;
  for (int d = 0; d < ix.rank; ++d) n *= ix.dims[d];
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(dst + reference(ix, 0, i) * bytes, src + reference(ix, 1, i) * bytes, size_t(bytes));
}

// The copy of wider elements moves the same bytes as the copy as given; `want`: the element size it groups into.
void expect_same_copy(const Indexing& given, int elem_bytes, int want, int64_t misalign = 0) {
  std::vector<char> src(4096), a(4096, 0), b(4096, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = char(i * 7 + 3);
  const auto aligned = [&](std::vector<char>& v) { return v.data() + (16 - uintptr_t(v.data()) % 16) % 16; };
  char *s = aligned(src) + misalign, *x = aligned(a), *y = aligned(b);
  Indexing wide = given;
  ASSERT_EQ(widen_contiguous_runs(wide, elem_bytes, y, s), want);
  copy_by(given, elem_bytes, s, x);
  copy_by(wide, want, s, y);
  EXPECT_EQ(a, b);
}

TEST(CudaIndexing, ContiguousRunsCopyAsWiderElements) {
  // a Transpose keeping the last axis (heads split from tokens), bf16 runs of 8: 16-byte elements
  expect_same_copy(make({2, 3, 4, 8}, {{96, 32, 8, 1}, {96, 8, 24, 1}}), 2, 16);
  // runs of 6 bf16: 4-byte elements; float32 rows of 2 broadcast down (Expand): 8-byte elements
  expect_same_copy(make({5, 6}, {{6, 1}, {12, 1}}), 2, 4);
  expect_same_copy(make({7, 2}, {{2, 1}, {0, 1}}), 4, 8);
  // a source 2 bytes past alignment, a last axis that moves (a full transpose), bytes already: as given
  expect_same_copy(make({4, 8}, {{8, 1}, {8, 1}}), 2, 2, 2);
  expect_same_copy(make({4, 8}, {{8, 1}, {1, 4}}), 2, 2);
  expect_same_copy(make({3, 16}, {{16, 1}, {32, 1}}), 16, 16);
  expect_same_copy(make({}, {{}, {}}), 4, 4);
}

}  // namespace
}  // namespace onnxtrain::kernels::cuda
#endif
