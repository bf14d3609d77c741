// The random ops' host kernels (ops/random.cpp): element i draws from counter_bits(seed, i), so a rerun with the
// same seed (a recomputed clone) draws bit-identical numbers whatever the threading. Normal draws by Box-Muller.
#include "ops/random.h"

#include <cmath>

#include "core/parallel.h"
#include "kernels/counter_random.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/kernel.h"

namespace onnxtrain::kernels {
namespace {

float draw(const ops::RandomAttrs& a, uint64_t bits, float p) {
  switch (a.kind) {
    case ops::RandomAttrs::kUniform:
      return a.a + (a.b - a.a) * unit_uniform(bits);
    case ops::RandomAttrs::kNormal: {
      float radius = std::sqrt(-2.f * std::log(unit_uniform_open(bits)));
      return a.a + a.b * radius * std::cos(6.2831853071795865f * unit_uniform(bits));
    }
    case ops::RandomAttrs::kBernoulli:
      return unit_uniform(bits) < p ? 1.f : 0.f;
  }
  return 0.f;
}

// out[i] drawn from element i's bits (and Bernoulli's probability p[i], read where it is).
template <typename T, typename P>
void fill(const ops::RandomAttrs& a, uint64_t seed, T* out, const P* p, int64_t n) {
  parallel_for(n, 16, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) out[i] = T(draw(a, counter_bits(seed, uint64_t(i)), p ? float(p[i]) : 0.f));
  });
}

void random(const ops::RandomAttrs& a, KernelCtx& c) {
  Tensor& y = c.out(0);
  const uint64_t seed = a.has_seed ? uint64_t(a.seed) : c.seed;
  dispatch<kAll>(y.dtype(), c.node.where(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (a.kind != ops::RandomAttrs::kBernoulli) return fill<T, float>(a, seed, y.data<T>(), nullptr, y.numel());
    dispatch<kFloats>(c.in(0).dtype(), c.node.where(), [&](auto ptag) {
      using P = typename decltype(ptag)::type;
      fill(a, seed, y.data<T>(), c.in(0).data<P>(), y.numel());
    });
  });
}

const bool kRegistered = register_kernels(kCpu, {{"", "RandomUniform", kernel(random)},
                                                  {"", "RandomNormal", kernel(random)},
                                                  {"", "RandomUniformLike", kernel(random)},
                                                  {"", "RandomNormalLike", kernel(random)},
                                                  {"", "Bernoulli", kernel(random)}});

}  // namespace
}  // namespace onnxtrain::kernels
