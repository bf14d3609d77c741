// libFuzzer target: the memory optimizer's config and budget strings, and sizes -> parse.
#include "fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  onnxtrain::fuzz::handled(
      [&] { onnxtrain::fuzz::parse_memory_settings(std::string(reinterpret_cast<const char*>(data), size)); });
  return 0;
}
