#include "core/cpu_features.h"

#include <cstdlib>
#include <sstream>

namespace onnxtrain::cpu {
namespace {

Features detect() {
  Features f;
  __builtin_cpu_init();
  f.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  f.avx512_bf16 = f.avx512 && __builtin_cpu_supports("avx512bf16");
  if (const char* off = std::getenv("ONNXTRAIN_CPU_DISABLE")) {
    std::stringstream items(off);
    for (std::string item; std::getline(items, item, ',');) {
      if (item == "avx512") f.avx512 = f.avx512_bf16 = false;
      if (item == "avx512_bf16") f.avx512_bf16 = false;
    }
  }
  return f;
}

Features& current() {
  static Features f = detect();
  return f;
}

}  // namespace

const Features& features() { return current(); }

void restrict_features(bool avx512, bool avx512_bf16) {
  Features cpu = detect();
  current().avx512 = avx512 && cpu.avx512;
  current().avx512_bf16 = avx512_bf16 && avx512 && cpu.avx512_bf16;
}

std::string Features::str() const {
  std::string s = std::string(avx512 ? "avx512 " : "") + (avx512_bf16 ? "avx512_bf16 " : "");
  return s.empty() ? "baseline" : s.substr(0, s.size() - 1);
}

}  // namespace onnxtrain::cpu
