// Resize's typed attributes and its sampling geometry (shared by its shape function and its kernels).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ops/op.h"

namespace onnxtrain::ops {

struct ResizeAttrs {
  const ir::Node* node;                      // the attributes ResizeGrad is built with
  std::string mode, coord, nearest, policy;  // coordinate_transformation_mode, nearest_mode, keep_aspect_ratio_policy
  float cubic_a, extrapolation;
  bool exclude_outside;
  std::vector<int64_t> axes;
  bool opset10;                      // scales as input 1, no roi (Resize-10, Upsample)
  std::vector<double> fixed_scales;  // Upsample-7's scales attribute (and its ResizeGrad's)

  // Per-axis scales and output sizes (concrete), from scales or sizes.
  struct Geometry {
    std::vector<double> scale;
    std::vector<int64_t> out;
    std::vector<double> roi_start, roi_end;
  };
  std::optional<Geometry> geometry(InferCtx& ctx, const std::vector<int64_t>& in) const;
  // The axes that `scales` / `sizes` list (all when the attribute is absent), non-negative.
  std::vector<int64_t> resized_axes(InferCtx& ctx, size_t rank) const;
  // Whether axis a keeps its size and samples (the resampling skips it).
  bool unchanged(const Geometry& g, int64_t a, int64_t in) const;
};

}  // namespace onnxtrain::ops
