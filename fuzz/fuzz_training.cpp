// libFuzzer target: model bytes -> a training graph (autodiff, the memory optimizer's plans, the allocation plan)
// and one forward and backward on small generated inputs.
#include "fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  onnxtrain::fuzz::handled(
      [&] { onnxtrain::fuzz::train_model(std::string(reinterpret_cast<const char*>(data), size)); });
  return 0;
}
