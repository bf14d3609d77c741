// ONNX import and export: ModelProto <-> ir::Graph (ONNX's own protobuf classes).
#pragma once
#include <memory>
#include <string>

#include "ir/graph.h"

namespace onnx {
class ModelProto;
class TensorProto;
}  // namespace onnx

namespace onnxtrain::ir {

// Loads and validates a model; shapes and ops are bound later (ops::bind_graph).
// base_dir resolves external data files; empty for models given as bytes.
std::unique_ptr<Graph> import_model(const onnx::ModelProto& model, const std::string& base_dir);
std::unique_ptr<Graph> load_model_file(const std::string& path);
std::unique_ptr<Graph> load_model_bytes(const std::string& bytes);

void export_model(const Graph& g, onnx::ModelProto* model);
// Written atomically: a temporary file renamed into place.
void save_model_file(const Graph& g, const std::string& path);

// TensorProto <-> Tensor; `where` prefixes error messages.
Tensor tensor_from_proto(const onnx::TensorProto& t, const std::string& base_dir, const std::string& where);
void tensor_to_proto(const Tensor& t, const std::string& name, onnx::TensorProto* out);
Tensor load_tensor_file(const std::string& path);
void write_file_atomic(const std::string& path, const std::string& bytes);

}  // namespace onnxtrain::ir
