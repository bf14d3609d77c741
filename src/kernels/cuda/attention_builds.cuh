// The tensor-core attention kernels' two builds (attention_mma.cuh's forward, attention_grad.cuh's grad). The general
// build takes any mask, bias and dropout. The lean build leaves out the code that reads a mask or a bias score by
// score (a mixed tile of attention_tile_kind.cuh's map) and dropout's draw score by score (keys not whole blocks of
// the draw), so that its loop holds less code (fewer instruction fetch stalls) in fewer registers (more warps a
// multiprocessor). Whether a map has a mixed tile is known on the device alone, once the map is made (its kernel sets
// Attention::mixed): where either build may apply, the launch runs both, and each block of the one that does not
// returns at once.
#pragma once
#include "kernels/cuda/attention_tiles.cuh"  // (ONNXTRAIN_MMA_ATTENTION)

namespace onnxtrain::kernels::cuda::ONNXTRAIN_MMA_ATTENTION {

// Whether the lean build may apply (dropout, if any, by whole blocks of its draw), and whether the general one may
// (the lean may not, or the map may have a mixed tile). `general`: the general build alone, for comparison
// (ONNXTRAIN_CUDA_ATTENTION=general).
inline bool launches_lean(const Attention& a, bool general) {
  return !general && (!a.dropout || a.tk % int64_t(kDropoutBlock) == 0);
}
inline bool launches_general(const Attention& a, bool general) { return !launches_lean(a, general) || a.mixed; }

// launch.template operator()<kLean>(a) for each build that may apply, a.both_builds set where both may.
template <typename F>
void with_builds(Attention a, bool general, F&& launch) {
  const bool lean = launches_lean(a, general), full = launches_general(a, general);
  a.both_builds = lean && full;
  if (lean) launch.template operator()<true>(a);
  if (full) launch.template operator()<false>(a);
}

// Whether a block of build kLean returns at once: the launch runs both builds (Attention::both_builds) and the map
// says the other applies.
template <bool kLean>
__device__ __forceinline__ bool other_build(const Attention& a) {
  return a.both_builds && (*a.mixed != 0) == kLean;
}

}  // namespace onnxtrain::kernels::cuda::ONNXTRAIN_MMA_ATTENTION
