// What a model holds, as `onnxtrain inspect` prints it: opsets, inputs and outputs with symbolic shapes, parameters,
// an op histogram with the devices that have a kernel of each op, unsupported ops, and what shape inference could
// not know before run time.
#pragma once
#include <string>

namespace onnxtrain {

std::string inspect_model(const std::string& path);

}  // namespace onnxtrain
