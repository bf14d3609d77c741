// Norm gradient residual: a Sum of two gradients, one a LayerNormalizationGrad's or RMSNormalizationGrad's dX that
// nothing else reads, the other of its dtype and shape (the residual stream's gradient, joined where the norm's input
// branched off the stream: every pre-norm transformer's layers), becomes the norm gradient with the other as its
// input `base` (ops/normalization.h), which writes the sum, in the base's place where that dies there: no Sum and its
// pass over three activations. Float32 dX alone (under autocast, the stream's): the sum rounded as the Sum rounded it.
#include "passes/pass.h"

namespace onnxtrain::passes {
namespace {

// The norm gradient's input that takes a base: 5 (LayerNormalizationGrad), 4 (RMSNormalizationGrad); 0 for others.
size_t base_slot(const ir::Node* n) {
  if (!n || n->domain != "com.onnxtrain") return 0;
  return n->op_type == "LayerNormalizationGrad" ? 5 : n->op_type == "RMSNormalizationGrad" ? 4 : 0;
}

class NormGradResidual : public Pass {
 public:
  std::string name() const override { return "norm_grad_residual"; }
  bool apply(ir::Graph& g) const override {
    std::vector<const ir::Node*> gone;
    for (ir::Node* sum : nodes_of(g, "Sum")) {
      if (sum->inputs.size() != 2 || !has_inputs(sum, 2) || sum->outputs.size() != 1 || !sum->outputs[0]) continue;
      for (size_t k = 0; k < 2; ++k) {
        ir::Value *dx = sum->inputs[k], *base = sum->inputs[1 - k];
        ir::Node* norm = dx->producer;
        const size_t slot = base_slot(norm);
        if (!slot || norm->outputs.empty() || norm->outputs[0] != dx || norm->input(slot) || dx == base ||
            !sole_reader(g, dx, sum) || dx->dtype != DType::kFloat32 || base->dtype != dx->dtype ||
            !dx->has_shape || !base->has_shape || dx->shape != base->shape)
          continue;
        std::vector<ir::Value*> ins = norm->inputs, outs = norm->outputs;
        ins.resize(slot, nullptr);
        ins.push_back(base);
        outs[0] = sum->outputs[0];
        add_fused(g, norm->domain, norm->opset, norm->op_type, ins, outs, g.unique_name(norm->name + "_based"),
                  norm->backward, norm->attrs);
        gone.push_back(norm);
        gone.push_back(sum);
        break;
      }
    }
    return remove_all(g, gone, true);
  }
};

}  // namespace

std::unique_ptr<Pass> norm_grad_residual() { return std::make_unique<NormGradResidual>(); }

}  // namespace onnxtrain::passes
