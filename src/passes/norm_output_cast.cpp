// Norm output cast: a float32 LayerNormalization or com.onnxtrain.RMSNormalization whose output is read only by a
// Cast to a 16-bit float (through a Reshape where one stands between; Shape nodes may read it too) becomes
// com.onnxtrain's LayerNormalization or RMSNormalization with attribute `to` that dtype: it writes the 16-bit output
// itself, computing in float32 and rounding once, as the Cast did (under autocast, the norms before GPT-2's and
// Llama's products: the float32 copy and the Cast's pass over it go). Its gradient takes the 16-bit dY as it
// comes (the Cast's gradient, the widening back, goes too). A LayerNormalization folds only where its gradient is
// the fused LayerNormalizationGrad's: a scale of X's dtype shaped as the normalized dims.
#include "ops/normalization.h"
#include "passes/pass.h"

namespace onnxtrain::passes {
namespace {

// Whether the norm n (of X's dtype float32) may write its output in 16 bits.
bool foldable(const ir::Node* n) {
  if (!has_inputs(n, 2) || n->outputs.empty() || !n->outputs[0] || n->input(0)->dtype != DType::kFloat32 ||
      n->outputs[0]->dtype != DType::kFloat32 || n->has_attr("to"))
    return false;
  return n->op_type == "RMSNormalization" ||
         ops::layer_norm_fused_grad(n->input(0), n->input(1), n->attr_int("axis", -1));
}

class NormOutputCast : public Pass {
 public:
  std::string name() const override { return "norm_output_cast"; }
  bool apply(ir::Graph& g) const override {
    std::vector<ir::Node*> norms = nodes_of(g, "LayerNormalization");
    for (ir::Node* n : nodes_of(g, "RMSNormalization", "com.onnxtrain")) norms.push_back(n);
    std::vector<const ir::Node*> gone;
    for (ir::Node* n : norms) {
      if (!foldable(n)) continue;
      ir::Value* y = n->outputs[0];
      const auto [reshape, cast] = narrowing_reader(g, y);
      if (!cast) continue;
      ir::Attributes attrs = n->attrs;
      attrs["to"] = int64_t(cast->outputs[0]->dtype);
      fold_cast(
          g, reshape, cast, "_16",
          [&](ir::Value* narrow) {
            std::vector<ir::Value*> outs = n->outputs;
            outs[0] = narrow;
            add_fused(g, "com.onnxtrain", 1, n->op_type, n->inputs, outs, g.unique_name(n->name + "_16"),
                      n->backward, attrs);
            g.replace_uses(y, narrow);  // (the Shape nodes, and the Reshape or the Cast, which go)
          },
          gone);
      gone.push_back(n);
    }
    return remove_all(g, gone, true);
  }
};

}  // namespace

std::unique_ptr<Pass> norm_output_cast() { return std::make_unique<NormOutputCast>(); }

}  // namespace onnxtrain::passes
