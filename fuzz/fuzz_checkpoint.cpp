// libFuzzer target: checkpoint bytes -> load into a training session. With ONNXTRAIN_FUZZ_WRITE_SEEDS=FOLDER it
// first writes its seed corpus there (checkpoints of the sessions it loads into).
#include <cstdlib>

#include "fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* folder = std::getenv("ONNXTRAIN_FUZZ_WRITE_SEEDS")) onnxtrain::fuzz::write_checkpoint_seeds(folder);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  onnxtrain::fuzz::handled(
      [&] { onnxtrain::fuzz::load_checkpoint(std::string(reinterpret_cast<const char*>(data), size)); });
  return 0;
}
