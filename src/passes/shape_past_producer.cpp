// Shape past its input's producer: Shape(y, start, end) where y's dims [start, end) are, in order, dims of x, the
// first input of y's producer (a Transpose's by its perm; any other op's at the same places, as shape inference
// found them equal), becomes Shape(x) of those dims, so that a value read only for its shape (exporters read a
// sequence length or a head size off the keys they transpose or the heads they split) goes with dead code. Repeated
// over the rounds, a Shape moves back to the first value that holds its dims.
#include <algorithm>

#include "passes/pass.h"

namespace onnxtrain::passes {
namespace {

// Where dims [start, end) of y lie in x, the first input of y's producer p: the first of them, or -1.
int64_t dims_in_input(const ir::Node* p, const ir::Value* y, int64_t start, int64_t end) {
  const ir::Value* x = p->input(0);
  if (!x || !x->has_shape || !y->has_shape) return -1;
  if (p->op_type == "Transpose" && p->domain.empty()) {
    const std::vector<int64_t> perm = p->attr_ints("perm");
    if (perm.size() != x->shape.size()) return -1;
    for (int64_t i = start; i < end; ++i)
      if (perm[size_t(i)] != perm[size_t(start)] + i - start) return -1;
    return perm[size_t(start)];
  }
  if (int64_t(x->shape.size()) < end) return -1;
  for (int64_t i = start; i < end; ++i)
    if (x->shape[size_t(i)] != y->shape[size_t(i)]) return -1;
  return start;
}

class ShapePastProducer : public Pass {
 public:
  std::string name() const override { return "shape_past_producer"; }
  bool apply(ir::Graph& g) const override {
    std::vector<const ir::Node*> gone;
    for (ir::Node* s : nodes_of(g, "Shape")) {
      const ir::Value* y = has_inputs(s, 1) ? s->input(0) : nullptr;
      const ir::Node* p = y ? y->producer : nullptr;
      if (!p || !y->has_shape || p->op_type == "Shape") continue;
      const int64_t rank = int64_t(y->shape.size());
      auto at = [&](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + rank : i, 0, rank); };
      const int64_t start = at(s->attr_int("start", 0)), end = at(s->attr_int("end", rank));
      const int64_t from = start < end ? dims_in_input(p, y, start, end) : -1;
      if (from < 0) continue;
      add_fused(g, "", s->opset, "Shape", {p->input(0)}, {s->outputs[0]}, g.unique_name(s->name + "_past"),
                s->backward, {{"start", from}, {"end", from + end - start}});
      gone.push_back(s);
    }
    return remove_all(g, gone, true);
  }
};

}  // namespace

std::unique_ptr<Pass> shape_past_producer() { return std::make_unique<ShapePastProducer>(); }

}  // namespace onnxtrain::passes
