// Every input that once crashed a fuzz target (fuzz/regressions/TARGET/, kept after its fix) now ends in success
// or a typed onnxtrain::Error, in this build and under the sanitizers (build-sanitize's run of these tests).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "core/allocator.h"
#include "fuzz/fuzz_support.h"

using namespace onnxtrain;

namespace {

void replay(const std::string& target, const std::function<void(const std::string&)>& fn) {
  std::filesystem::path folder = std::filesystem::path(ONNXTRAIN_FUZZ_REGRESSIONS) / target;
  if (!std::filesystem::exists(folder)) return;
  int64_t limit = CachingAllocator::global().stats().limit;
  for (const auto& entry : std::filesystem::directory_iterator(folder)) {
    std::ifstream f(entry.path(), std::ios::binary);
    std::stringstream bytes;
    bytes << f.rdbuf();
    SCOPED_TRACE(entry.path().string());
    try {
      fn(bytes.str());
    } catch (const Error&) {
    } catch (const std::exception& e) {
      ADD_FAILURE() << "an untyped exception: " << e.what();
    }
  }
  CachingAllocator::global().set_limit(limit);
}

}  // namespace

TEST(FuzzRegressions, ModelInputsEndInSuccessOrATypedError) { replay("model", fuzz::run_model); }
TEST(FuzzRegressions, TrainingInputsEndInSuccessOrATypedError) { replay("training", fuzz::train_model); }
TEST(FuzzRegressions, CheckpointInputsEndInSuccessOrATypedError) { replay("checkpoint", fuzz::load_checkpoint); }
TEST(FuzzRegressions, MemoryConfigInputsEndInSuccessOrATypedError) {
  replay("memory_config", fuzz::parse_memory_settings);
}
