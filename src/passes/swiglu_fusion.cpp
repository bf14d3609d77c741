// SwiGLU fusion: silu(gate) * up, silu written as gate * Sigmoid(gate) (how PyTorch's exporter writes F.silu),
// the products in either order, gate and up of one shape and dtype, the values between read by nothing else,
// becomes com.onnxtrain.SwiGLU(gate, up).
#include "passes/pass.h"

namespace onnxtrain::passes {
namespace {

class SwiGLUFusion : public Pass {
 public:
  std::string name() const override { return "swiglu_fusion"; }
  bool apply(ir::Graph& g) const override {
    std::vector<const ir::Node*> gone;
    for (ir::Node* sigmoid : nodes_of(g, "Sigmoid")) {
      ir::Value *gate = sigmoid->input(0), *s = sigmoid->outputs[0];
      ir::Node* silu = only_reader(g, s);
      if (!gate || !silu || silu->op_type != "Mul" || other_input(silu, s) != gate) continue;
      ir::Value* act = silu->outputs[0];
      ir::Node* product = only_reader(g, act);
      ir::Value* up = product && product->op_type == "Mul" ? other_input(product, act) : nullptr;
      if (!up || up == act || !up->has_shape || !gate->has_shape || up->shape != gate->shape ||
          up->dtype != gate->dtype || !dtype_is_float(gate->dtype))
        continue;
      add_fused(g, "com.onnxtrain", 1, "SwiGLU", {gate, up}, {product->outputs[0]},
                g.unique_name(product->name + "_swiglu"), product->backward);
      gone.insert(gone.end(), {sigmoid, silu, product});
    }
    return remove_all(g, gone, true);
  }
};

}  // namespace

std::unique_ptr<Pass> swiglu_fusion() { return std::make_unique<SwiGLUFusion>(); }

}  // namespace onnxtrain::passes
