// The tensor-core FlashAttention kernels (kernels/cuda/attention_mma.cuh) run on the host through the warp emulation,
// against attention computed in float64 from the same 16-bit operands (attention_emulated.h): tiles past the rows and
// the keys, zero-padded heads of both sizes, operands staged 16 bytes at a time and an element at a time, operands as
// (B, H, T, d) and sequence-major (B, T, H, d) (dQ summed as it lies), grouped-query heads, a causal mask with a finite
// fill, an additive bias, dropout (the CPU's draw; by a row's block key where rows are whole blocks of it), a fully
// masked row, causal masks (a fill or a bias of -inf) whose upper tiles are skipped, lower tiles read no mask and
// diagonal ones none either, their 16 x 16 tiles causal (the map of the tiles' kinds made once, or a batch's each for a
// mask and a bias that differ between batches); dQ summed over the key tiles by float atomics. Operands staged by
// cp.async land only when the kernel waits for them (a wait too late reads stale tiles), and ldmatrix hands out PTX's
// fragments. What the emulation cannot show (the layouts as the hardware has them, timing)
// Cuda.TiledAttentionComputesAsOnTheCpu checks on a GPU.
#ifdef ONNXTRAIN_WITH_CUDA
#include "warp_emulation.h"  // first: the CUDA qualifiers for the host compiler
#define ONNXTRAIN_MMA_ATTENTION emulated_mma_attention
#include "attention_emulated.h"
#include "attention_random_cases.h"

#include <string>

namespace onnxtrain::kernels::cuda {
namespace {

// The kind of rows r0 .. r0 + R - 1 by keys j0 .. j0 + C - 1 as the block votes on it (every thread of the block
// calls it): the reference the map's warps (tc::tile_kinds) and the merged kinds of its tiles (tc::kind_of) are
// checked against.
template <typename T, int R, int C>
tc::TileKind tile_kind(const Attention& a, const AttentionPair<T>& p, int64_t r0, int64_t j0, float fill) {
  if (!a.cond && !a.bias) return tc::TileKind::kPlain;
  const tc::GroupVotes v = tc::votes<T, R, C>(a, p, r0, j0, fill, int(threadIdx.x), tc::kBlock);
  tc::TileKind whole{};
  for (int g = 0; g < C / kKindKeys; ++g) {
    const int live = __syncthreads_or(int(v.live >> g & 1)), touched = __syncthreads_or(int(v.touched >> g & 1));
    const tc::TileKind k = tc::kind_voted(live, touched, __syncthreads_or(int(v.departs >> g & 1)));
    if (g == 0 || j0 + kKindKeys * g < a.tk) whole = g == 0 ? k : tc::merged(whole, k);
  }
  return whole;
}

TEST(TensorCoreAttention, TilesPastTheRowsAndKeysWithACausalFill) {
  Emulated<__half>(Case{}).check();
}

// Random cases (attention_random_cases.h), in both 16-bit dtypes, heads of up to 128 elements, either build.
TEST(TensorCoreAttention, RandomCasesComputeAsInFloat64) {
  check_random_cases<__half>(128, true);
  check_random_cases<__nv_bfloat16>(128, true);
}

// 16-bit operands take the warp-per-row kernels where heads exceed 128 elements (and under
// ONNXTRAIN_CUDA_ATTENTION=simple): a causal fill and dropout over grouped heads, sequence-major.
TEST(TensorCoreAttention, HeadsOverOneHundredTwentyEightTakeTheWarpPerRowKernels) {
  Case c;
  c.warp_rows = true, c.heads = 4, c.groups = 4, c.tq = 17, c.tk = 30, c.d = 160, c.dv = 256;
  c.dropout = 0.1f, c.sequence_major = true;
  Emulated<__half>(c).check();
  c.d = c.dv = 64;
  Emulated<__nv_bfloat16>(c).check();
}

TEST(TensorCoreAttention, PaddedHeadsGroupedQueriesBiasAndDropout) {
  Case c;
  c.batch = 2, c.heads = 3, c.groups = 3, c.tq = 37, c.tk = 37, c.d = 40, c.dv = 20;
  c.bias = true, c.fill = -INFINITY, c.dropout = 0.25f, c.shift = 5, c.mixed = 1;
  Emulated<__half>(c).check();
  c.scan_pairs = true;
  Emulated<__half>(c).check();
  c.sequence_major = true;  // (Q's rows 120 elements apart, staged 16 bytes at a time; V's of 20 an element at a time)
  Emulated<__half>(c).check();
}

// Score rows of whole blocks of dropout's draw (keys a multiple of 64): each row draws its tile's scores from one block
// key, in the tiles the causal mask leaves plain (the fast paths) and on its diagonal.
TEST(TensorCoreAttention, DropoutOverWholeBlocksOfKeysDrawsFromARowsKey) {
  Case c;
  c.heads = 2, c.groups = 2, c.tq = 100, c.tk = 128, c.fill = -INFINITY, c.dropout = 0.3f;
  Emulated<__nv_bfloat16>(c).check();
  c.d = c.dv = 128;
  Emulated<__half>(c).check();
}

TEST(TensorCoreAttention, LargeHeadsAndAFullyMaskedRowInBfloat16) {
  Case c;
  c.heads = 2, c.groups = 2, c.tq = 20, c.tk = 130, c.d = 96, c.dv = 128;
  c.causal = false, c.fill = -INFINITY, c.zero_masked_rows = true, c.masked_row = 5;
  Emulated<__nv_bfloat16>(c).check();
}

TEST(TensorCoreAttention, CausalTilesOfMinusInfinityAreSkippedWithTwoKeyValueHeads) {
  Case c;
  c.heads = 4, c.groups = 2, c.tq = 144, c.tk = 144, c.d = 32, c.dv = 32, c.fill = -INFINITY;
  Emulated<__half>(c).check();
  Case packed = c;  // (4 query heads and 2 key-value heads side by side: 256 elements a row; two tiles of rows)
  packed.tq = packed.tk = 80, packed.sequence_major = packed.packed = true;
  Emulated<__nv_bfloat16>(packed).check();
  c.batch = 2, c.causal = false, c.bias = c.causal_bias = true, c.shift = 64;
  Emulated<__nv_bfloat16>(c).check();
  c.sequence_major = true;  // (grouped heads as the projections lay them out: K's rows 2 heads apart)
  Emulated<__nv_bfloat16>(c).check();
  c.packed = true;  // (and side by side at three tiles of rows, over two batches)
  Emulated<__nv_bfloat16>(c).check();
}

// A causal mask as a bool mask and as an additive bias of 0 and -inf, rows a multiple of 16 elements: their tiles
// read 16 bytes at a time, the lower ones' scores computed without the mask (attention_tile_kind.cuh), the
// diagonal's with it, the upper ones skipped.
TEST(TensorCoreAttention, CausalMasksTakenATileAtATime) {
  Case c;
  c.tq = 150, c.tk = 144, c.fill = -INFINITY;
  Emulated<__nv_bfloat16>(c).check();
  c.causal = false, c.bias = c.causal_bias = c.zero_below = true;
  Emulated<__nv_bfloat16>(c).check();
  c.d = c.dv = 128;
  Emulated<__half>(c).check();
}

// GPT-2's attention in training: its causal mask an additive bias of 0 and -inf of a batch's own, dropout over whole
// blocks of keys, three tiles of rows and keys: causal tiles of a bias, the map's words, whole tiles staged with no
// bound tested, the rows' staged keys of the draw, one barrier a step, dQ summed from three blocks of keys. No tile
// mixed: the lean build runs, and the general one where it is asked for alone. The operands heads first, then as
// GPT-2's attention reads them (the attention_layout pass's): sequence-major, then Q, K and V side by side as its one
// projection writes them (rows 384 elements apart), Y sequence-major; for the general build, each of its own,
// sequence-major.
TEST(TensorCoreAttention, GptTwosBiasAndDropoutOverSeveralTiles) {
  Case c;
  c.batch = 2, c.heads = 2, c.tq = c.tk = 192, c.causal = false, c.bias = c.causal_bias = c.zero_below = true;
  c.fill = -INFINITY, c.dropout = 0.1f, c.shift = 64, c.mixed = 0;
  Emulated<__nv_bfloat16>(c).check();
  c.sequence_major = true;
  Emulated<__nv_bfloat16>(c).check();
  c.packed = true;
  Emulated<__nv_bfloat16>(c).check();
  c.packed = false, c.general = true;
  Emulated<__nv_bfloat16>(c).check();
}

// The pairs reading each K and V batch index, for Q's batch (2, 6) and K's as the kv strides and groups give it: evenly
// spaced where every index is read by a run of pairs or by pairs a batch apart, else found by the backward's scan.
TEST(TensorCoreAttention, ThePairsReadingAKeyAreSpacedEvenlyWhereTheyAre) {
  auto spaced = [](std::vector<int64_t> kv_strides, int64_t kv_count, int64_t groups) {
    Attention a;
    a.pairs = 12, a.kv_count = kv_count, a.groups = groups, a.kv_heads = kv_count / (kv_strides[0] ? 2 : 1);
    a.batch.rank = 2, a.batch.dims[0] = 2, a.batch.dims[1] = 6;
    a.batch.strides[1][0] = kv_strides[0], a.batch.strides[1][1] = kv_strides[1];
    space_kv_pairs(a);
    return std::vector<int64_t>{a.kv_pairs, a.kv_pair_mult, a.kv_pair_step};
  };
  EXPECT_EQ(spaced({6, 1}, 12, 1), (std::vector<int64_t>{1, 1, 0}));  // a pair a head
  EXPECT_EQ(spaced({6, 1}, 4, 3), (std::vector<int64_t>{3, 3, 1}));   // 2 key heads, 3 query heads each
  EXPECT_EQ(spaced({0, 1}, 6, 1), (std::vector<int64_t>{2, 1, 6}));   // K and V broadcast over the batch
  EXPECT_EQ(spaced({1, 0}, 2, 1), (std::vector<int64_t>{6, 6, 1}));   // over the heads
  EXPECT_EQ(spaced({0, 1}, 2, 3), (std::vector<int64_t>{0, 0, 0}));   // both: runs a batch apart, scanned
}

// The live tiles of a run of 100, stepped over in order as a block does, the warp reading 32 tiles' kinds at once and
// holding them: each lane reads the map once for every 32 tiles (4 reads), past a run of dead ones longer than a warp
// (tiles 0 .. 40) and from a start off the tiles held; none before the end.
TEST(TensorCoreAttention, TheLiveTilesAreReadAWarpOfTilesAtATime) {
  const int count = 100, live_at = 41;
  auto kind = [&](int n) {
    return n < live_at ? tc::TileKind::kDead : n == live_at ? tc::TileKind::kCausal : tc::TileKind::kPlain;
  };
  std::vector<std::vector<tc::LiveTiles::At>> got(32);
  std::vector<int> reads(32, 0);
  testing::emulate(1, 32, [&] {
    tc::LiveTiles tiles;
    auto read = [&](int n) {
      ++reads[threadIdx.x];
      return kind(n);
    };
    for (tc::LiveTiles::At t = tiles.next(0, count, read); t.n < count; t = tiles.next(t.n + 1, count, read))
      got[threadIdx.x].push_back(t);
    got[threadIdx.x].push_back(tiles.next(count, count, read));
    tc::LiveTiles fresh;
    got[threadIdx.x].push_back(fresh.next(50, count, read));  // (a start off 32 tiles' bounds)
  });
  for (int lane = 0; lane < 32; ++lane) {
    ASSERT_EQ(got[lane].size(), size_t(count - live_at + 2)) << lane;
    for (int n = live_at; n < count; ++n) {
      EXPECT_EQ(got[lane][size_t(n - live_at)].n, n);
      EXPECT_EQ(got[lane][size_t(n - live_at)].kind, kind(n));
    }
    EXPECT_GE(got[lane][size_t(count - live_at)].n, count);
    EXPECT_EQ(got[lane][size_t(count - live_at)].kind, tc::TileKind::kDead);
    EXPECT_EQ(got[lane].back().n, 50);
    EXPECT_EQ(got[lane].back().kind, tc::TileKind::kPlain);
    // (tiles 0, 32, 64 and, those before the end, 96 of the walk; 50 of the fresh one)
    EXPECT_EQ(reads[lane], 3 + (96 + lane < count) + 1) << lane;
  }
}

// One pair of n rows by n keys (heads of 64) under the bool mask cond, its rows n apart.
Attention one_pair(const bool* cond, int64_t n) {
  Attention a;
  a.pairs = 1, a.tq = a.tk = n, a.d = a.dv = 64, a.kv_count = 1;
  a.batch.rank = 1, a.batch.dims[0] = 1;
  a.cond = cond, a.cond_row = n, a.cond_col = 1;
  return a;
}

// A causal bool mask's tiles as the kernels classify them, its rows read 16 bytes at a time (aligned rows of 144) and
// an element at a time (the same rows one byte off 16-byte alignment): the upper ones dead where the fill is -inf
// (masked but live where it is finite), the lower ones plain (no mask read per score), the diagonal's mixed, and
// those past the rows or the keys as the scores inside them (the last one's only 16 x 16 tile inside causal).
TEST(TensorCoreAttention, ACausalMasksTilesAreDeadPlainMixedOrCausal) {
  const int64_t n = 144;
  std::unique_ptr<bool[]> buffer(new bool[size_t(n * n + 16)]);
  bool* aligned = buffer.get() + (16 - reinterpret_cast<uintptr_t>(buffer.get()) % 16) % 16;
  for (bool* cond : {aligned, aligned + 1}) {
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < n; ++j) cond[r * n + j] = j > r;
    for (float fill : {-INFINITY, -30.f}) {
      const Attention a = one_pair(cond, n);
      const AttentionPair<__half> p{0, cond, nullptr, 0};
      auto kind = [&](int64_t r0, int64_t j0) {
        tc::TileKind k{};
        testing::emulate(1, tc::kBlock, [&] {
          const tc::TileKind mine = tile_kind<__half, tc::kTile, tc::kTile>(a, p, r0, j0, fill);
          if (threadIdx.x == 0) k = mine;
        });
        return k;
      };
      const std::string where = std::string(cond == aligned ? "aligned" : "unaligned") + ", fill " +
                                std::to_string(fill);
      EXPECT_EQ(kind(0, 0), tc::TileKind::kMixed) << where;
      EXPECT_EQ(kind(0, 64), fill == -INFINITY ? tc::TileKind::kDead : tc::TileKind::kMixed) << where;
      EXPECT_EQ(kind(64, 0), tc::TileKind::kPlain) << where;
      EXPECT_EQ(kind(128, 0), tc::TileKind::kPlain) << where;
      EXPECT_EQ(kind(128, 128), fill == -INFINITY ? tc::TileKind::kCausal : tc::TileKind::kMixed) << where;
      EXPECT_EQ(kind(64, 128), fill == -INFINITY ? tc::TileKind::kDead : tc::TileKind::kMixed) << where;
    }
  }
}

// A tile of 16 rows by 16 keys is causal (the kernels compare a score's place in it, reading neither the mask nor the
// bias) exactly where its scores are -inf above its diagonal and unchanged on and under it, those inside the keys
// (the kernels make the others -inf): a bool mask with a fill of -inf and a bias of 0 and -inf, read 16 bytes at a
// time and an element at a time; not with a finite fill, a diagonal 5 keys to the right or one score more masked.
TEST(TensorCoreAttention, ATileIsCausalWhereItsScoresAreMinusInfinityAboveItsDiagonalAlone) {
  const int64_t n = 48, wide = n + 1;  // rows of the mask n apart (16-byte reads), or n + 1 (an element at a time)
  std::unique_ptr<bool[]> buffer(new bool[size_t(n * wide + 16)]);
  bool* cond = buffer.get() + (16 - reinterpret_cast<uintptr_t>(buffer.get()) % 16) % 16;
  std::vector<__half> bias(size_t(n * n));
  auto kind = [&](bool with_bias, int64_t row, int64_t tk, float fill, int64_t r0, int64_t j0) {
    Attention a = one_pair(cond, n);
    a.tk = tk, a.cond_row = row;
    if (with_bias) a.cond = nullptr, a.bias = bias.data(), a.bias_row = n, a.bias_col = 1;
    const AttentionPair<__half> p{0, a.cond, with_bias ? bias.data() : nullptr, 0};
    tc::TileKind k{};
    testing::emulate(1, tc::kBlock, [&] {
      const tc::TileKind mine = tile_kind<__half, 16, 16>(a, p, r0, j0, fill);
      if (threadIdx.x == 0) k = mine;
    });
    return k;
  };
  for (int64_t shift : {0, 5})
    for (bool extra : {false, true}) {
      auto off = [&](int64_t r, int64_t j) { return j > r + shift || (extra && r == 20 && j == 17); };
      const bool causal = shift == 0 && !extra;
      const std::string where = "shift " + std::to_string(shift) + (extra ? ", a score more masked" : "");
      for (int64_t row : {n, wide}) {
        for (int64_t r = 0; r < n; ++r)
          for (int64_t j = 0; j < n; ++j) {
            cond[r * row + j] = off(r, j);
            if (row == n) bias[size_t(r * n + j)] = __float2half(off(r, j) ? -INFINITY : 0.f);
          }
        for (bool with_bias : {false, true}) {
          if (with_bias && row != n) continue;
          const std::string how = where + (with_bias ? ", bias" : ", mask") + (row == n ? "" : ", unaligned rows");
          const tc::TileKind diagonal = shift == 0 ? tc::TileKind::kCausal : tc::TileKind::kMixed;
          EXPECT_EQ(kind(with_bias, row, n, -INFINITY, 0, 0), diagonal) << how;
          EXPECT_EQ(kind(with_bias, row, n, -INFINITY, 16, 16), causal ? diagonal : tc::TileKind::kMixed) << how;
          EXPECT_EQ(kind(with_bias, row, n - 3, -INFINITY, 32, 32), diagonal) << how << ", past the keys";
          EXPECT_EQ(kind(with_bias, row, n, -INFINITY, 32, 16), tc::TileKind::kPlain) << how;
        }
        EXPECT_EQ(kind(false, row, n, -30.f, 0, 0), tc::TileKind::kMixed) << where << ", a finite fill";
      }
    }
}

// The map of tiles of 16 rows by 16 keys (tile_kinds), read for 16, 32 and 64 rows by 16 or 64 keys (kind_of), gives
// each tile the kind a vote over the tile as a whole gives: a causal mask's, and a mask that leaves only the first 16
// rows open (a 64-row tile's first 16 rows plain, the rest dead: mixed as a whole).
TEST(TensorCoreAttention, TheMapOfSixteenRowTilesGivesTheKindsOfLargerOnes) {
  const int64_t n = 144;
  std::unique_ptr<bool[]> cond(new bool[size_t(n * n)]);
  for (bool causal : {true, false}) {
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < n; ++j) cond[size_t(r * n + j)] = causal ? j > r : r >= 16;
    const float fill = -INFINITY;
    Attention a = one_pair(cond.get(), n);
    const __half fill_h = __float2half(fill);
    a.fill = &fill_h;
    std::vector<uint8_t> kinds(size_t(size_kinds(a)), 0xff);
    place_map(a, kinds.data());
    *a.mixed = 0;
    testing::emulate(unsigned(tc::tile_kinds_blocks(a)), tc::kBlock, [&] { tc::tile_kinds<__half>(a); });
    EXPECT_EQ(*a.mixed, 0u);  // (every 16 x 16 tile dead, plain or causal)
    const AttentionPair<__half> p{0, cond.get(), nullptr, 0};
    for (int64_t r0 = 0; r0 < n; r0 += 32)
      for (int64_t j0 = 0; j0 < n; j0 += 64) {
        tc::TileKind whole32{}, whole64{};
        testing::emulate(1, tc::kBlock, [&] {
          const tc::TileKind k32 = tile_kind<__half, 32, tc::kTile>(a, p, r0, j0, fill);
          const tc::TileKind k64 = tile_kind<__half, 64, tc::kTile>(a, p, r0, j0, fill);
          if (threadIdx.x == 0) whole32 = k32, whole64 = k64;
        });
        EXPECT_EQ((tc::kind_of<32, tc::kTile>(a, 0, r0, j0)), whole32) << causal << " " << r0 << " " << j0;
        if (r0 % 64 == 0) {
          EXPECT_EQ((tc::kind_of<64, tc::kTile>(a, 0, r0, j0)), whole64) << causal << " " << r0 << " " << j0;
        }
      }
    for (int64_t r0 = 0; r0 < n; r0 += 16)
      for (int64_t j0 = 0; j0 < n; j0 += 16) {
        tc::TileKind whole16{};
        testing::emulate(1, tc::kBlock, [&] {
          const tc::TileKind k16 = tile_kind<__half, 16, 16>(a, p, r0, j0, fill);
          if (threadIdx.x == 0) whole16 = k16;
        });
        EXPECT_EQ((tc::kind_of<16, 16>(a, 0, r0, j0)), whole16) << causal << " " << r0 << " " << j0;
        if (causal) {  // (dead right of the diagonal, plain left of it, causal on it)
          EXPECT_EQ(whole16, j0 > r0 ? tc::TileKind::kDead : j0 < r0 ? tc::TileKind::kPlain : tc::TileKind::kCausal);
        }
      }
    if (!causal) {
      EXPECT_EQ((tc::kind_of<64, tc::kTile>(a, 0, 0, 0)), tc::TileKind::kMixed);
    }
  }
}

}  // namespace
}  // namespace onnxtrain::kernels::cuda
#endif
