// Narrowed GELU: a float32 Gelu of a 16-bit value widened by a Cast, read only by a Cast back to that 16-bit dtype
// (through a Reshape where one stands between, as GPT-2's Conv1D flattens the activation for its addmm; Shape nodes
// may read it too), becomes the Gelu of the 16-bit value. Its 16-bit kernels compute in float32 and round once, so
// the output has the same bits, without the two float32 copies of the activation (CUDA's autocast leaves GPT-2's MLP
// activation in float32, gelu_fusion.cpp: twice the bytes to move, and to stash for training). Its gradient, one
// GeluGrad, likewise computes in float32 and rounds once. The widening Cast stays while something else reads it.
#include "passes/pass.h"

namespace onnxtrain::passes {
namespace {

class NarrowGelu : public Pass {
 public:
  std::string name() const override { return "narrow_gelu"; }
  bool apply(ir::Graph& g) const override {
    std::vector<const ir::Node*> gone;
    for (ir::Node* gelu : nodes_of(g, "Gelu")) {
      const ir::Node* widen = has_inputs(gelu, 1) ? widening(gelu->input(0)) : nullptr;
      if (!widen || gelu->outputs.size() != 1) continue;
      ir::Value* y = gelu->outputs[0];
      const NarrowingReader back = narrowing_reader(g, y);
      if (!back.cast || back.cast->outputs[0]->dtype != widen->input(0)->dtype) continue;
      fold_cast(
          g, back.reshape, back.cast, "_16",
          [&](ir::Value* narrow) {
            add_fused(g, "", gelu->opset, "Gelu", {widen->input(0)}, {narrow}, g.unique_name(gelu->name + "_16"),
                      gelu->backward, gelu->attrs);
            g.replace_uses(y, narrow);  // (the Shape nodes, and the Reshape or the Cast, which go)
          },
          gone);
      gone.push_back(gelu);
    }
    return remove_all(g, gone, true);
  }
};

}  // namespace

std::unique_ptr<Pass> narrow_gelu() { return std::make_unique<NarrowGelu>(); }

}  // namespace onnxtrain::passes
