// `onnxtrain inspect MODEL`: inputs and outputs with symbolic shapes, op
// histogram, parameters, unsupported ops (onnxtrain::inspect_model).
#include <iostream>

#include "onnxtrain/inspect.h"
#include "tools/commands.h"

namespace onnxtrain::cli {

void add_inspect(CLI::App& app) {
  auto* cmd = app.add_subcommand("inspect", "Show a model's inputs, outputs, ops and parameters");
  auto path = std::make_shared<std::string>();
  cmd->add_option("model", *path, "ONNX model file")->required();
  cmd->callback([path] { std::cout << inspect_model(*path); });
}

}  // namespace onnxtrain::cli
