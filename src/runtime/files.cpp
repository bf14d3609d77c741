// The public API's tensor files (onnxtrain/files.h), over ir's ONNX reading and writing.
#include "onnxtrain/files.h"

#include <onnx/onnx_pb.h>

#include "ir/onnx_io.h"

namespace onnxtrain {

Tensor load_tensor(const std::string& path) { return ir::load_tensor_file(path); }

void save_tensor(const Tensor& t, const std::string& name, const std::string& path) {
  onnx::TensorProto p;
  ir::tensor_to_proto(t, name, &p);
  ir::write_file_atomic(path, p.SerializeAsString());
}

void write_file_atomic(const std::string& path, const std::string& bytes) { ir::write_file_atomic(path, bytes); }

}  // namespace onnxtrain
