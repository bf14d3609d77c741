// RMSNorm fusion: X * rsqrt(mean(X^2 over the last dim) + eps) * scale, as Llama, Qwen2, Mistral, Phi-3, T5 and Gemma
// write it (X^2 as Pow(X, 2) or X * X; rsqrt as Reciprocal(Sqrt) or a Div by the Sqrt; the scale on either side
// of the last product, a parameter or a value such as Gemma's 1 + w), every value between read by nothing else,
// becomes com.onnxtrain.RMSNormalization(X, scale): one kernel forward and one backward, and a stash of X and one
// statistic per row where the chain kept four activations.
#include <cmath>

#include "passes/pass.h"

namespace onnxtrain::passes {
namespace {

// Whether a ReduceMean keeps the dims and reduces the last of rank r alone (its axes an input from opset 18, an
// attribute before).
bool means_last_dim(const ir::Node* m, int64_t r) {
  if (m->attr_int("keepdims", 1) != 1) return false;
  std::vector<int64_t> axes = m->attr_ints("axes");
  if (m->inputs.size() > 1 && m->input(1)) {
    const ir::Value* a = m->input(1);
    if (!a->initializer || a->trainable) return false;
    axes = a->initializer->to_int64();
  }
  return axes.size() == 1 && last_axis(axes[0], r);
}

class RMSNormFusion : public Pass {
 public:
  std::string name() const override { return "rms_norm_fusion"; }
  bool apply(ir::Graph& g) const override {
    std::vector<const ir::Node*> gone;
    for (ir::Node* mean : nodes_of(g, "ReduceMean")) {
      if (!has_inputs(mean, 1)) continue;
      ir::Node* square = mean->input(0)->producer;
      if (!square || !only_reader(g, mean->input(0))) continue;
      ir::Value* x = square->input(0);
      bool squares = (square->op_type == "Pow" && has_inputs(square, 2) && scalar_value(square->input(1)) == 2.0) ||
                     (square->op_type == "Mul" && has_inputs(square, 2) && square->input(1) == x);
      if (!squares || !x->has_shape || x->shape.empty() || !dtype_is_float(x->dtype) ||
          !means_last_dim(mean, int64_t(x->shape.size())))
        continue;
      ir::Node* add = only_reader(g, mean->outputs[0]);
      if (!add || add->op_type != "Add" || !(scalar_value(other_input(add, mean->outputs[0])) >= 0)) continue;
      const double eps = scalar_value(other_input(add, mean->outputs[0]));
      ir::Node* sqrt = only_reader(g, add->outputs[0]);
      if (!sqrt || sqrt->op_type != "Sqrt") continue;
      std::vector<const ir::Node*> chain{square, mean, add, sqrt};
      ir::Node* normed = only_reader(g, sqrt->outputs[0]);  // X / sqrt, or X * Reciprocal(sqrt)
      if (normed && normed->op_type == "Reciprocal") {
        chain.push_back(normed);
        const ir::Value* rsqrt = normed->outputs[0];
        normed = only_reader(g, rsqrt);
        if (!normed || normed->op_type != "Mul" || other_input(normed, rsqrt) != x) continue;
      } else if (!normed || normed->op_type != "Div" || normed->input(0) != x) {
        continue;
      }
      chain.push_back(normed);
      ir::Node* scaled = only_reader(g, normed->outputs[0]);
      ir::Value* scale = scaled && scaled->op_type == "Mul" ? other_input(scaled, normed->outputs[0]) : nullptr;
      // a scale of the last dim's size (where either size is symbolic, the run checks them)
      if (!scale || !scale->has_shape || scale->shape.size() != 1 || scale->dtype != x->dtype) continue;
      const Dim &d = x->shape.back(), &w = scale->shape[0];
      if (d.is_const() && w.is_const() && d != w) continue;
      chain.push_back(scaled);
      ir::Value* rstd = g.add_value(g.unique_name(mean->name + "_rstd"));
      add_fused(g, "com.onnxtrain", 1, "RMSNormalization", {x, scale}, {scaled->outputs[0], rstd},
                g.unique_name(mean->name + "_rms_norm"), scaled->backward,
                {{"axis", int64_t(-1)}, {"epsilon", float(eps)}});
      gone.insert(gone.end(), chain.begin(), chain.end());
    }
    return remove_all(g, gone, true);
  }
};

}  // namespace

std::unique_ptr<Pass> rms_norm_fusion() { return std::make_unique<RMSNormFusion>(); }

}  // namespace onnxtrain::passes
