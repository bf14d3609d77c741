// What this CPU can do, detected once at run time, for kernels that have a faster path on some CPUs (bf16 dot
// products, AVX-512 conversions). ONNXTRAIN_CPU_DISABLE (a comma list: avx512_bf16, avx512) switches features off,
// so that a machine that has them can run, and test, the path of one that does not.
#pragma once
#include <string>

namespace onnxtrain::cpu {

struct Features {
  bool avx512 = false;       // AVX512F and AVX512BW
  bool avx512_bf16 = false;  // AVX512_BF16: bf16 dot products, float32 -> bf16 conversion
  std::string str() const;   // "avx512 avx512_bf16", or "baseline"
};

const Features& features();
// Tests: switch features off (or back on, up to what the CPU has) for the rest of the process.
void restrict_features(bool avx512, bool avx512_bf16);

}  // namespace onnxtrain::cpu
