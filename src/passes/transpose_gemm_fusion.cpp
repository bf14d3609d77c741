// Transpose into Gemm: Transpose(Gemm(A, B)) with perm [1, 0] is Gemm(B, A) with the transpose flags swapped
// and negated ((AB)^T = B^T A^T), when the Gemm has no C and nothing else reads its output. Autodiff makes this
// shape for every Linear layer's weight gradient (the gradient of MatMul(x, Transpose(W))), where it cost a
// copy of each weight-sized gradient.
#include <algorithm>

#include "kernels/shape_inference.h"
#include "ops/bind.h"
#include "passes/pass.h"

namespace onnxtrain::passes {
namespace {

class TransposeGemmFusion : public Pass {
 public:
  std::string name() const override { return "transpose_gemm_fusion"; }
  bool apply(ir::Graph& g) const override {
    std::vector<const ir::Node*> gone;
    for (auto& n : g.nodes()) {
      if (n->op_type != "Transpose" || !n->domain.empty() || !n->input(0) || !n->outputs[0]) continue;
      if (n->attr_ints("perm", {1, 0}) != std::vector<int64_t>{1, 0}) continue;
      ir::Value* t = n->input(0);
      ir::Node* gemm = t->producer;
      if (!gemm || gemm->op_type != "Gemm" || !gemm->domain.empty() || !has_inputs(gemm, 2) || gemm->input(2) ||
          !sole_reader(g, t, n.get()) || !t->has_shape || t->shape.size() != 2)
        continue;
      bool ta = gemm->attr_int("transA", 0), tb = gemm->attr_int("transB", 0);
      gemm->inputs = {gemm->input(1), gemm->input(0)};
      gemm->attrs["transA"] = int64_t(!tb);
      gemm->attrs["transB"] = int64_t(!ta);
      // The Gemm now makes the Transpose's output value (name, readers and graph-output role included).
      ir::Value* out = n->outputs[0];
      n->outputs[0] = g.add_value(g.unique_name(out->name + "_unfused"));
      n->outputs[0]->producer = n.get();
      gemm->outputs[0] = out;
      out->producer = gemm;
      t->producer = nullptr;
      t->consumers.clear();
      n->inputs[0] = nullptr;
      gemm->op = nullptr;  // rebound: the op reads its attributes once
      ops::bind_node(*gemm);
      kernels::infer_node(g, *gemm);
      gone.push_back(n.get());
    }
    return remove_all(g, gone, true);
  }
};

}  // namespace

std::unique_ptr<Pass> transpose_gemm_fusion() { return std::make_unique<TransposeGemmFusion>(); }

}  // namespace onnxtrain::passes
