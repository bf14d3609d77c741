// Sliding-window geometry shared by Conv and the pooling ops: kernel, strides,
// dilations, pads and auto_pad, output sizes symbolic or concrete.
#pragma once
#include <string>
#include <vector>

#include "core/dim.h"
#include "ir/graph.h"

namespace onnxtrain::ops {

struct Window {
  std::vector<int64_t> kernel, strides, dilations, pads;  // pads: begins then ends
  std::string auto_pad = "NOTSET";
  bool ceil_mode = false;

  // Reads the attributes; kernel from `kernel_shape` unless given (Conv takes it from W).
  static Window from_node(const ir::Node& n, std::vector<int64_t> kernel = {});
  // Output sizes for spatial input sizes `in`.
  std::vector<Dim> out_sizes(const std::vector<Dim>& in) const;
  // Concrete pads (begins then ends) for spatial input sizes `in`, resolving auto_pad.
  std::vector<int64_t> resolved_pads(const std::vector<int64_t>& in) const;
};

}  // namespace onnxtrain::ops
