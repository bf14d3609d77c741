// Shape past Transpose: Shape(Transpose(x, perm), start, end) whose dims [start, end) are dims [perm[start],
// perm[start] + end - start) of x in order becomes Shape(x) of those, so that a Transpose read only for its shape
// (exporters read a sequence length or a head size off the keys they transpose) goes with dead code.
#include <algorithm>

#include "passes/pass.h"

namespace onnxtrain::passes {
namespace {

class ShapePastTranspose : public Pass {
 public:
  std::string name() const override { return "shape_past_transpose"; }
  bool apply(ir::Graph& g) const override {
    std::vector<const ir::Node*> gone;
    for (ir::Node* s : nodes_of(g, "Shape")) {
      ir::Node* t = has_inputs(s, 1) ? made_by(s->input(0), "Transpose") : nullptr;
      if (!t || !t->input(0)->has_shape) continue;
      const std::vector<int64_t> perm = t->attr_ints("perm");
      const int64_t rank = int64_t(t->input(0)->shape.size());
      if (int64_t(perm.size()) != rank) continue;
      auto at = [&](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + rank : i, 0, rank); };
      const int64_t start = at(s->attr_int("start", 0)), end = at(s->attr_int("end", rank));
      if (start >= end) continue;
      bool run = true;
      for (int64_t i = start; i < end; ++i) run &= perm[size_t(i)] == perm[size_t(start)] + i - start;
      if (!run) continue;
      const int64_t from = perm[size_t(start)];
      add_fused(g, "", s->opset, "Shape", {t->input(0)}, {s->outputs[0]}, g.unique_name(s->name + "_past"),
                s->backward, {{"start", from}, {"end", from + end - start}});
      gone.push_back(s);
    }
    return remove_all(g, gone, true);
  }
};

}  // namespace

std::unique_ptr<Pass> shape_past_transpose() { return std::make_unique<ShapePastTranspose>(); }

}  // namespace onnxtrain::passes
