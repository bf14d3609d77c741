// Shape past its input's producer: Shape(y, start, end) where y's dims [start, end) are, in order, dims of x, the
// first input of y's producer (as shape inference found them: a Transpose's moved, a Reshape's regrouped), becomes
// Shape(x) of those dims, so that a value read only for its shape (exporters read a sequence length or a head size
// off the keys they transpose or the heads they split) goes with dead code. A Shape moves back producer by producer
// to the first value that holds its dims.
#include <algorithm>

#include "passes/pass.h"

namespace onnxtrain::passes {
namespace {

// Where dims [start, end) of y lie in x, the first input of y's producer p, in order (shape inference found them
// equal, so that they are at run time): the first of them, or -1.
int64_t dims_in_input(const ir::Node* p, const ir::Value* y, int64_t start, int64_t end) {
  const ir::Value* x = p->input(0);
  if (!x || !x->has_shape || !y->has_shape) return -1;
  const Shape want(y->shape.begin() + start, y->shape.begin() + end), &have = x->shape;
  for (size_t at = 0; at + want.size() <= have.size(); ++at)
    if (std::equal(want.begin(), want.end(), have.begin() + std::ptrdiff_t(at))) return int64_t(at);
  return -1;
}

class ShapePastProducer : public Pass {
 public:
  std::string name() const override { return "shape_past_producer"; }
  bool apply(ir::Graph& g) const override {
    std::vector<const ir::Node*> gone;
    for (ir::Node* s : nodes_of(g, "Shape")) {
      ir::Value* y = has_inputs(s, 1) ? s->input(0) : nullptr;
      const int64_t rank = y && y->has_shape ? int64_t(y->shape.size()) : 0;
      auto at = [&](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + rank : i, 0, rank); };
      int64_t start = at(s->attr_int("start", 0)), end = at(s->attr_int("end", rank));
      ir::Value* from = y;
      while (start < end && from->producer && from->producer->op_type != "Shape") {  // (as far back as it goes)
        const int64_t there = dims_in_input(from->producer, from, start, end);
        if (there < 0) break;
        from = from->producer->input(0), end = there + end - start, start = there;
      }
      if (from == y) continue;
      add_fused(g, "", s->opset, "Shape", {from}, {s->outputs[0]},
                g.unique_name(s->name + "_past"), s->backward, {{"start", start}, {"end", end}});
      gone.push_back(s);
    }
    return remove_all(g, gone, true);
  }
};

}  // namespace

std::unique_ptr<Pass> shape_past_producer() { return std::make_unique<ShapePastProducer>(); }

}  // namespace onnxtrain::passes
