// Bindings: the sizes of a graph's symbolic dims by symbol ({"batch": 8, "seq": 512}); the names are those of the
// model's inputs' dim_params, or "<input>_dim<i>" where onnxtrain.Module named them.
#pragma once
#include <cstdint>
#include <map>
#include <string>

namespace onnxtrain {

using Bindings = std::map<std::string, int64_t>;

}  // namespace onnxtrain
