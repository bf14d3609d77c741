// Tensors in files (ONNX TensorProto, as the ONNX test suites store inputs and outputs) and files written whole.
#pragma once
#include <string>

#include "onnxtrain/tensor.h"

namespace onnxtrain {

// A tensor from a serialized TensorProto file; IoError when unreadable, ModelError when malformed.
Tensor load_tensor(const std::string& path);
// `t` as a TensorProto named `name`, written atomically.
void save_tensor(const Tensor& t, const std::string& name, const std::string& path);
// Writes `bytes` to a temporary file beside `path`, then renames it into place.
void write_file_atomic(const std::string& path, const std::string& bytes);

}  // namespace onnxtrain
