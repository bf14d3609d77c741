// A training step's memory, predicted before it runs (Session::predict_memory), in bytes; sizes as users write them.
#pragma once
#include <cstdint>
#include <map>
#include <string>

namespace onnxtrain {

struct MemoryPrediction {
  int64_t parameters = 0;       // the `wrt` inputs (held by their owner)
  int64_t optimizer_state = 0;  // parameters times the optimizer state factor (SessionOptions)
  int64_t gradients = 0;        // the gradients one step returns
  int64_t stash = 0;            // activations kept from the forward part for the backward part
  int64_t peak = 0;             // the allocator's peak above its level before the step (activations, stash, gradients)
  std::map<std::string, int64_t> at_peak;  // `peak` by category: stash, gradient, recompute, transient, scratch
  int64_t total() const { return parameters + optimizer_state + peak; }  // the whole step's peak
  std::string str() const;
};

// A size in binary units ("6GiB", "512MiB", "100KiB", "123B") or a plain number of bytes. `what` names the setting
// in the InputError a malformed size raises.
int64_t parse_size(const std::string& text, const std::string& what);

}  // namespace onnxtrain
