// The float32 FlashAttention kernels (kernels/cuda/attention_f32.cuh) run on the host through the warp emulation,
// against attention computed in float64 from the same operands (attention_emulated.h): tiles past the rows and the
// keys, zero-padded heads (rows staged 16 bytes at a time and an element at a time), operands as (B, H, T, d),
// sequence-major and side by side in one tensor, grouped-query heads, a causal mask with a finite fill and with -inf
// (its upper tiles skipped, its lower ones read no mask, its diagonal's 16 x 16 tiles causal), an additive float32
// bias, dropout (the CPU's draw; by a row's block key where rows are whole blocks of it), a fully masked row; dQ
// summed over the key blocks by float atomics. And the map's votes on a float32 bias alone, 4 elements a read where
// its rows align. Cuda.TiledAttentionComputesAsOnTheCpu and Cuda.Float32AttentionUnderBiasesComputesAsOnTheCpu check
// the same kernels on a GPU.
#ifdef ONNXTRAIN_WITH_CUDA
#include "warp_emulation.h"  // first: the CUDA qualifiers for the host compiler
#define ONNXTRAIN_MMA_ATTENTION emulated_f32_attention
#include "attention_emulated.h"
#include "attention_random_cases.h"

namespace onnxtrain::kernels::cuda {
namespace {

// A finite fill: the masked scores keep a share of the probability (in Y and dV), and no gradient (dQ, dK).
TEST(Float32Attention, TilesPastTheRowsAndKeysWithACausalFill) {
  Case c;
  Emulated<float>(c).check();
  c.fill = -0.5f;
  Emulated<float>(c).check();
}

// Random cases (attention_random_cases.h), heads of up to 64 elements.
TEST(Float32Attention, RandomCasesComputeAsInFloat64) { check_random_cases<float>(64, false); }

// Heads of 40 and 20 elements (rows staged 16 bytes at a time), then of 30 and 18 (an element at a time), then
// values' heads larger than the keys' (V's rows staged as wide as V's, not K's).
TEST(Float32Attention, PaddedHeadsGroupedQueriesBiasAndDropout) {
  Case c;
  c.batch = 2, c.heads = 3, c.groups = 3, c.tq = 37, c.tk = 37, c.d = 40, c.dv = 20;
  c.bias = true, c.fill = -INFINITY, c.dropout = 0.25f, c.shift = 5, c.mixed = 1;
  Emulated<float>(c).check();
  c.scan_pairs = true;
  Emulated<float>(c).check();
  c.sequence_major = true;
  Emulated<float>(c).check();
  c.d = 30, c.dv = 18;
  Emulated<float>(c).check();
  c.d = 8, c.dv = 61;
  Emulated<float>(c).check();
}

// Heads over 64 elements take the warp-per-row kernels (attention_warp_rows.cuh): grouped queries, a bias and
// dropout, a masked row, then sequence-major and side by side in one X.
TEST(Float32Attention, HeadsOverSixtyFourTakeTheWarpPerRowKernels) {
  Case c;
  c.warp_rows = true, c.heads = 4, c.groups = 2, c.tq = 20, c.tk = 23, c.d = 96, c.dv = 128;
  c.bias = true, c.dropout = 0.2f, c.masked_row = 7, c.zero_masked_rows = true, c.fill = -INFINITY;
  Emulated<float>(c).check();
  c.batch = 2, c.sequence_major = c.packed = true, c.tk = c.tq, c.d = c.dv = 80;
  Emulated<float>(c).check();
}

// Score rows of whole blocks of dropout's draw (keys a multiple of 64): a row's scores drawn from its block key, the
// second step of 32 keys of a block from the same key as the first.
TEST(Float32Attention, DropoutOverWholeBlocksOfKeysDrawsFromARowsKey) {
  Case c;
  c.heads = 2, c.groups = 2, c.tq = 100, c.tk = 128, c.fill = -INFINITY, c.dropout = 0.3f;
  Emulated<float>(c).check();
}

TEST(Float32Attention, AFullyMaskedRowGivesZeros) {
  Case c;
  c.heads = 2, c.groups = 2, c.tq = 20, c.tk = 130, c.d = 64, c.dv = 48;
  c.causal = false, c.fill = -INFINITY, c.zero_masked_rows = true, c.masked_row = 5;
  Emulated<float>(c).check();
}

// A causal mask as a bool mask and as a float32 bias of 0 and -inf (rows of 144 elements and of 147), over several
// tiles of rows and keys, grouped heads and a map a batch.
TEST(Float32Attention, CausalMasksAndBiasesTakenATileAtATime) {
  Case c;
  c.heads = 4, c.groups = 2, c.tq = 144, c.tk = 144, c.d = 32, c.dv = 32, c.fill = -INFINITY, c.mixed = 0;
  Emulated<float>(c).check();
  c.causal = false, c.bias = c.causal_bias = c.zero_below = true;
  Emulated<float>(c).check();
  c.tk = 147, c.mixed = -1;
  Emulated<float>(c).check();
  c.tk = 144, c.batch = 2, c.shift = 64, c.bias = c.causal_bias = true, c.zero_below = false;
  Emulated<float>(c).check();
}

// GPT-2's attention in training, as the attention_layout pass lays it out: the causal mask an additive bias of a
// batch's own, dropout 0.1 over whole blocks of keys, three tiles of rows, six blocks of keys, Q, K and V side by
// side in one tensor (rows 384 elements apart) and Y sequence-major.
TEST(Float32Attention, GptTwosBiasAndDropoutOverSeveralTiles) {
  Case c;
  c.batch = 2, c.heads = 2, c.tq = c.tk = 192, c.causal = false, c.bias = c.causal_bias = c.zero_below = true;
  c.fill = -INFINITY, c.dropout = 0.1f, c.shift = 64, c.mixed = 0;
  Emulated<float>(c).check();
  c.sequence_major = c.packed = true;
  Emulated<float>(c).check();
}

// The map of a float32 causal bias of 0 and -inf alone (no mask): its 16 x 16 tiles dead right of the diagonal, plain
// left of it and causal on it, its rows read 4 elements at a time (rows of 144) and an element at a time (147).
TEST(Float32Attention, TheMapReadsAFloat32BiasFourElementsAtATime) {
  for (int64_t row : {144, 147}) {
    const int64_t n = 144;
    std::vector<float> bias(size_t(n * row), 0.f);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = r + 1; j < n; ++j) bias[size_t(r * row + j)] = -INFINITY;
    Attention a;
    a.pairs = 1, a.tq = a.tk = n, a.d = a.dv = 64, a.kv_count = 1;
    a.batch.rank = 1, a.batch.dims[0] = 1;
    a.bias = bias.data(), a.bias_row = row, a.bias_col = 1;
    std::vector<uint8_t> kinds(size_t(size_kinds(a)), 0xff);
    place_map(a, kinds.data());
    *a.mixed = 0;
    testing::emulate(unsigned(tc::tile_kinds_blocks(a)), tc::kBlock, [&] { tc::tile_kinds<float>(a); });
    EXPECT_EQ(*a.mixed, 0u) << row;
    for (int64_t r0 = 0; r0 < n; r0 += 16)
      for (int64_t j0 = 0; j0 < n; j0 += 16) {
        const tc::TileKind want =
            j0 > r0 ? tc::TileKind::kDead : j0 < r0 ? tc::TileKind::kPlain : tc::TileKind::kCausal;
        EXPECT_EQ((tc::kind_of<16, 16>(a, 0, r0, j0)), want) << row << " " << r0 << " " << j0;
      }
  }
}

}  // namespace
}  // namespace onnxtrain::kernels::cuda
#endif
