#include "ops/window.h"

#include "onnxtrain/error.h"

namespace onnxtrain::ops {

Window Window::from_node(const ir::Node& n, std::vector<int64_t> kernel) {
  Window w;
  w.kernel = kernel.empty() ? n.attr_ints("kernel_shape") : kernel;
  size_t k = w.kernel.size();
  w.strides = n.attr_ints("strides", std::vector<int64_t>(k, 1));
  w.dilations = n.attr_ints("dilations", std::vector<int64_t>(k, 1));
  w.pads = n.attr_ints("pads", std::vector<int64_t>(2 * k, 0));
  w.auto_pad = n.attr_string("auto_pad", "NOTSET");
  w.ceil_mode = n.attr_int("ceil_mode", 0);
  if (w.strides.size() != k || w.dilations.size() != k || w.pads.size() != 2 * k)
    throw ModelError(n.where() + ": kernel_shape, strides, dilations and pads disagree in length");
  if (w.auto_pad != "NOTSET" && w.auto_pad != "SAME_UPPER" && w.auto_pad != "SAME_LOWER" && w.auto_pad != "VALID")
    throw ModelError(n.where() + ": auto_pad '" + w.auto_pad + "' is not NOTSET, SAME_UPPER, SAME_LOWER or VALID");
  return w;
}

std::vector<Dim> Window::out_sizes(const std::vector<Dim>& in) const {
  std::vector<Dim> out;
  for (size_t i = 0; i < kernel.size(); ++i) {
    Dim span = Dim(dilations[i] * (kernel[i] - 1) + 1);
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      out.push_back(Dim::ceil_div(in[i], Dim(strides[i])));
    } else if (auto_pad == "VALID") {
      out.push_back(Dim::floor_div(in[i] - span, Dim(strides[i])) + Dim(1));
    } else {
      Dim avail = in[i] + Dim(pads[i] + pads[i + kernel.size()]) - span;
      Dim o = ceil_mode ? Dim::ceil_div(avail, Dim(strides[i])) : Dim::floor_div(avail, Dim(strides[i]));
      o = o + Dim(1);
      // With ceil_mode the last window must start inside the input or the left pad.
      if (ceil_mode && o.is_const() && in[i].is_const() && (o.value() - 1) * strides[i] >= in[i].value() + pads[i])
        o = Dim(o.value() - 1);
      out.push_back(o);
    }
  }
  return out;
}

std::vector<int64_t> Window::resolved_pads(const std::vector<int64_t>& in) const {
  size_t k = kernel.size();
  if (auto_pad == "NOTSET") return pads;
  std::vector<int64_t> p(2 * k, 0);
  if (auto_pad == "VALID") return p;
  for (size_t i = 0; i < k; ++i) {
    int64_t out = (in[i] + strides[i] - 1) / strides[i];
    int64_t total = std::max<int64_t>(0, (out - 1) * strides[i] + dilations[i] * (kernel[i] - 1) + 1 - in[i]);
    int64_t small = total / 2, large = total - small;
    p[i] = auto_pad == "SAME_UPPER" ? small : large;
    p[i + k] = auto_pad == "SAME_UPPER" ? large : small;
  }
  return p;
}

}  // namespace onnxtrain::ops
