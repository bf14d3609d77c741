// Reading and writing the checkpoint format of docs/checkpoint.md.
#pragma once
#include <map>
#include <string>

#include "onnxtrain/tensor.h"

namespace onnxtrain::runtime {

struct Checkpoint {
  int64_t step = 0;
  double learning_rate = 0;
  std::string optimizer;
  std::map<std::string, Tensor> tensors;  // "param/...", "buffer/...", "state1/...", "state2/..."
};

// Written atomically (a temporary file renamed into place).
void write_checkpoint(const std::string& path, const Checkpoint& c);
// Throws IoError for a missing file, CheckpointError for a corrupt one.
Checkpoint read_checkpoint(const std::string& path);

}  // namespace onnxtrain::runtime
