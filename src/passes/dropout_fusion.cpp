// Dropout fusion: what autocast and the residual stream put around a Dropout goes into com.onnxtrain.Dropout.
// - A Dropout of a 16-bit input whose output is read only by a Cast to float32 gets attribute `to` float32: the mask
//   applied in the 16-bit dtype and the result widened as the Cast did, in one pass (under autocast, GPT-2's residual
//   dropouts after a product, whose output joins the float32 residual stream: the 16-bit copy and the Cast's pass
//   over it go). Its gradient, com.onnxtrain.DropoutGrad with `to` the 16-bit dtype, reads the float32 dY as the
//   residual's sum writes it (the Cast's gradient, the narrowing back, goes too).
// - Then a Dropout (ONNX's from opset 12, or one made so) whose output only an Add reads, the Add's other input of the
//   output's dtype and shape, takes that input as its input 3, the residual, and writes the sum, in the residual's
//   place where that dies there: the dropout's output is neither written nor read again (GPT-2's residual dropouts,
//   in float32 as under autocast).
// The node keeps the Dropout's random key: the same mask as before.
#include "passes/pass.h"

namespace onnxtrain::passes {
namespace {

// The Dropout n again, in com.onnxtrain's domain with `attrs`, its output 0 made `out` and `extra` inputs more (the
// residual); n and `reader` (what read its output) go into `gone`.
void refold(ir::Graph& g, ir::Node* n, ir::Node* reader, ir::Value* out, const std::vector<ir::Value*>& extra,
            ir::Attributes attrs, std::vector<const ir::Node*>& gone) {
  std::vector<ir::Value*> ins = n->inputs, outs = n->outputs;
  ins.resize(3, nullptr);
  ins.insert(ins.end(), extra.begin(), extra.end());
  outs[0] = out;
  ir::Node* f = add_fused(g, "com.onnxtrain", 1, "Dropout", ins, outs, g.unique_name(n->name + "_fused"),
                          n->backward, std::move(attrs));
  f->random_key = n->key();
  gone.push_back(n);
  gone.push_back(reader);
}

class DropoutFusion : public Pass {
 public:
  std::string name() const override { return "dropout_fusion"; }
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
      refold(g, n, cast, cast->outputs[0], {}, attrs, gone);
    }
    const bool cast_folded = remove_all(g, gone, true);
    gone.clear();
    std::vector<ir::Node*> dropouts = nodes_of(g, "Dropout", "com.onnxtrain");
    for (ir::Node* n : nodes_of(g, "Dropout"))
      if (n->opset >= 12) dropouts.push_back(n);
    for (ir::Node* n : dropouts) {
      ir::Value* y = n->outputs.empty() ? nullptr : n->outputs[0];
      ir::Node* add = y && has_inputs(n, 1) ? only_reader(g, y) : nullptr;
      if (n->input(3) || !add || add->op_type != "Add" || !add->domain.empty() || !has_inputs(add, 2) ||
          add->outputs.size() != 1 || !add->outputs[0] || add->input(0) == add->input(1))
        continue;
      ir::Value* r = other_input(add, y);
      if (!r || r->dtype != y->dtype || !r->has_shape || !y->has_shape || r->shape != y->shape) continue;
      refold(g, n, add, add->outputs[0], {r}, n->attrs, gone);
    }
    return remove_all(g, gone, true) || cast_folded;
  }
};

}  // namespace

std::unique_ptr<Pass> dropout_fusion() { return std::make_unique<DropoutFusion>(); }

}  // namespace onnxtrain::passes
