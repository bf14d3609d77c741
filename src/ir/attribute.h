// Node attributes: a typed value per name, as ONNX stores them.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "onnxtrain/tensor.h"

namespace onnxtrain::ir {

using Attribute = std::variant<int64_t, float, std::string, std::vector<int64_t>, std::vector<float>,
                               std::vector<std::string>, Tensor>;
using Attributes = std::map<std::string, Attribute>;

const char* attribute_kind_name(const Attribute& a);

}  // namespace onnxtrain::ir
