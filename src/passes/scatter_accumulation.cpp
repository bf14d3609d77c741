// Scatter accumulation: a gradient summed from an embedding's scatter-add into zeros and another contribution of
// the same shape (a tied language-model head's dW), Sum(a, ScatterND(ConstantOfShape(0), i, u, add)), becomes one
// scatter-add into that contribution, ScatterND(a, i, u, add) (ScatterElements alike): no zeros the size of the
// vocabulary, no Sum, and the scatter updates `a` where it lies when nothing else reads it.
#include <algorithm>

#include "passes/pass.h"

namespace onnxtrain::passes {
namespace {

// Whether v is ConstantOfShape's zeros (its default value or a zero one).
bool zeros(const ir::Value* v) {
  const ir::Node* n = made_by(v, "ConstantOfShape");
  if (!n) return false;
  const Tensor* value = n->attr_tensor("value");
  if (!value) return true;
  auto d = value->to_double();
  return std::all_of(d.begin(), d.end(), [](double x) { return x == 0; });
}

class ScatterAccumulation : public Pass {
 public:
  std::string name() const override { return "scatter_accumulation"; }
  bool apply(ir::Graph& g) const override {
    std::vector<const ir::Node*> gone;
    for (ir::Node* sum : nodes_of(g, "Sum")) {
      if (sum->inputs.size() != 2 || !has_inputs(sum, 2) || !sum->outputs[0]) continue;
      for (size_t k = 0; k < 2; ++k) {
        ir::Value *s = sum->inputs[k], *a = sum->inputs[1 - k];
        ir::Node* scatter = s->producer;
        if (!scatter || scatter->domain != "" || !has_inputs(scatter, 3) ||
            (scatter->op_type != "ScatterND" && scatter->op_type != "ScatterElements") ||
            scatter->attr_string("reduction", "none") != "add" || !sole_reader(g, s, sum) ||
            !zeros(scatter->inputs[0]) || !sole_reader(g, scatter->inputs[0], scatter) || a == s ||
            !a->has_shape || !s->has_shape || a->shape != s->shape || a->dtype != s->dtype)
          continue;
        add_fused(g, "", scatter->opset, scatter->op_type,
                  {a, scatter->inputs[1], scatter->inputs[2]}, {sum->outputs[0]},
                  g.unique_name(scatter->name + "_into"), sum->backward, scatter->attrs);
        gone.insert(gone.end(), {scatter->inputs[0]->producer, scatter, sum});
        break;
      }
    }
    return remove_all(g, gone, true);
  }
};

}  // namespace

std::unique_ptr<Pass> scatter_accumulation() { return std::make_unique<ScatterAccumulation>(); }

}  // namespace onnxtrain::passes
