// Einsum's typed attributes, read by its kernel.
#pragma once
#include <string>
#include <vector>

#include "ops/op.h"

namespace onnxtrain::ops {

struct EinsumAttrs {
  std::string equation;  // spaces removed
  // The equation with each operand's labels; ellipsis dims become labels '0'..'9'.
  struct Equation {
    std::vector<std::string> inputs;
    std::string output;
  };
  Equation parse(InferCtx& ctx) const;
};

}  // namespace onnxtrain::ops
