// Dropout output cast: a Dropout of a 16-bit input whose output is read only by a Cast to float32 becomes
// com.onnxtrain.Dropout with attribute `to` float32: the mask applied in the 16-bit dtype and the result widened as
// the Cast did, in one pass (under autocast, GPT-2's residual dropouts after a product, whose output joins the float32
// residual stream: the 16-bit copy and the Cast's pass over it go). Its gradient, com.onnxtrain.DropoutGrad with `to`
// the 16-bit dtype, reads the float32 dY as the residual's sum writes it (the Cast's gradient, the narrowing back,
// goes too). The node keeps the Dropout's random key: the same mask as before the fold.
#include "passes/pass.h"

namespace onnxtrain::passes {
namespace {

class DropoutOutputCast : public Pass {
 public:
  std::string name() const override { return "dropout_output_cast"; }
  bool apply(ir::Graph& g) const override {
    std::vector<const ir::Node*> gone;
    for (ir::Node* n : nodes_of(g, "Dropout")) {
      if (n->opset < 12 || !has_inputs(n, 1) || n->outputs.empty() || !n->outputs[0] ||
          !dtype_is_16bit_float(n->input(0)->dtype))
        continue;
      ir::Node* cast = only_reader(g, n->outputs[0]);
      if (!cast || cast->op_type != "Cast" || !cast->domain.empty() || cast->outputs.size() != 1 ||
          !cast->outputs[0] || cast->outputs[0]->dtype != DType::kFloat32)
        continue;
      ir::Attributes attrs = n->attrs;
      attrs["to"] = int64_t(DType::kFloat32);
      std::vector<ir::Value*> outs = n->outputs;
      outs[0] = cast->outputs[0];
      ir::Node* f = add_fused(g, "com.onnxtrain", 1, "Dropout", n->inputs, outs, g.unique_name(n->name + "_32"),
                              n->backward, attrs);
      f->random_key = n->key();
      gone.push_back(n);
      gone.push_back(cast);
    }
    return remove_all(g, gone, true);
  }
};

}  // namespace

std::unique_ptr<Pass> dropout_output_cast() { return std::make_unique<DropoutOutputCast>(); }

}  // namespace onnxtrain::passes
