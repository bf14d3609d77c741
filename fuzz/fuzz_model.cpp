// libFuzzer target: model bytes -> import, passes and shape inference, a run on small generated inputs.
#include "fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  onnxtrain::fuzz::handled([&] { onnxtrain::fuzz::run_model(std::string(reinterpret_cast<const char*>(data), size)); });
  return 0;
}
