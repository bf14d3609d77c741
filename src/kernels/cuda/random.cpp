// The CUDA kernels of the random ops (ops/random.cpp: RandomUniform[Like], RandomNormal[Like], Bernoulli), on
// random.cu's launcher: float outputs, the node's seed or the run's, as the CPU's kernel.
#include "kernels/cuda/indexing.h"
#include "ops/random.h"

namespace onnxtrain::kernels::cuda {
namespace {

void random_node(const ops::RandomAttrs& a, KernelCtx& c) {
  Tensor& y = c.out(0);
  const uint64_t seed = a.has_seed ? uint64_t(a.seed) : c.seed;
  const bool bernoulli = a.kind == ops::RandomAttrs::kBernoulli;
  if (bernoulli && c.in(0).numel() != y.numel())
    c.fail("the probabilities " + dims_str(c.in(0).dims()) + " are not shaped as the output " + dims_str(y.dims()));
  random_fill(int(a.kind), y.dtype(), y.raw(), y.numel(), seed, a.a, a.b,
              bernoulli ? c.in(0).dtype() : DType::kFloat32, bernoulli ? c.in(0).raw() : nullptr, stream());
}

const bool kRegistered = register_kernels(cuda_device(0), {{"", "RandomUniform", kernel(random_node)},
                                                           {"", "RandomNormal", kernel(random_node)},
                                                           {"", "RandomUniformLike", kernel(random_node)},
                                                           {"", "RandomNormalLike", kernel(random_node)},
                                                           {"", "Bernoulli", kernel(random_node)}});

}  // namespace
}  // namespace onnxtrain::kernels::cuda
