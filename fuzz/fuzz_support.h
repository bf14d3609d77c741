// What each libFuzzer target does with its input, as functions that the targets and the regression test
// (tests/cpp/fuzz_regressions_test.cpp) share. Bad input must end in a typed onnxtrain::Error: anything else
// escaping, and any crash or undefined behaviour under the sanitizers, is a finding.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "onnxtrain/error.h"
#include "onnxtrain/tensor.h"

namespace onnxtrain::fuzz {

// Memory the host allocator may hand out: past it, a typed OutOfMemoryError.
constexpr int64_t kAllocatorLimit = int64_t(256) << 20;
// Inputs larger than this many elements are not generated (the run is skipped).
constexpr int64_t kMaxInputElements = int64_t(1) << 16;

// Model bytes: imported, compiled for inference (passes, shape inference, plan) and run on small inputs.
void run_model(const std::string& bytes);
// Model bytes: differentiated for every float input and initializer, the memory optimizer at level
// bytes.size() % 3, then one forward and one backward with every output's gradient given.
void train_model(const std::string& bytes);
// Checkpoint bytes: loaded into an MLP training session, AdamW or SGD with momentum by bytes.size() % 2.
void load_checkpoint(const std::string& bytes);
// The checkpoints of both sessions after one step, written into `folder` (the seed corpus).
void write_checkpoint_seeds(const std::string& folder);
// A memory config, a budget and a size: parsed, each on its own.
void parse_memory_settings(const std::string& text);

// A tensor for each of `inputs`: symbolic dims 2, fixed dims as declared, values a small deterministic pattern
// (integers 0..2, so that they index anything non-empty). Nothing when an input has no shape, no dtype onnxtrain
// holds, or is too large.
std::optional<std::map<std::string, Tensor>> small_inputs(const std::vector<ir::Value*>& inputs);

// Runs `f`: a typed onnxtrain::Error is a handled bad input, any other exception aborts (a finding).
template <typename F>
void handled(F&& f) {
  try {
    f();
  } catch (const Error&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "untyped exception escaped: %s\n", e.what());
    std::abort();
  }
}

}  // namespace onnxtrain::fuzz
