// Slice gradients to a Concat: the gradients of Slices that cut a tensor into consecutive parts along one axis, each
// a com.onnxtrain.SliceGrad (zeros of the tensor's shape, the part's gradient written in), summed, become one Concat
// of the parts' gradients: no zeros written and summed three times over. Phi-3's fused query-key-value projection
// and GPT-NeoX's per-head one are cut so (q = qkv[..., :a], k = qkv[..., a:b], v = qkv[..., b:]).
#include <algorithm>

#include "passes/pass.h"

namespace onnxtrain::passes {
namespace {

// The constant integers of v (absent: `missing`), or nothing when v is not a constant.
std::optional<std::vector<int64_t>> constant_ints(const ir::Value* v, std::vector<int64_t> missing) {
  if (!v) return missing;
  if (!v->initializer || v->trainable) return std::nullopt;
  return v->initializer->to_int64();
}

struct Part {
  int64_t begin, end;
  ir::Value* dy;
};

// The part of dim `axis` (of static size `size`, rank `rank`) that SliceGrad n writes, when it writes one range of
// one axis with step 1; the axis in `axis` (-1 until the first part sets it).
std::optional<Part> part_of(const ir::Node* n, int64_t rank, int64_t* axis, int64_t* size) {
  if (!n || n->op_type != "SliceGrad" || n->domain != "com.onnxtrain" || !has_inputs(n, 4) || !n->outputs[0] ||
      !n->outputs[0]->has_shape)
    return std::nullopt;
  auto starts = constant_ints(n->input(2), {}), ends = constant_ints(n->input(3), {});
  auto axes = constant_ints(n->input(4), {0}), steps = constant_ints(n->input(5), {1});
  if (!starts || !ends || !axes || !steps || starts->size() != 1 || ends->size() != 1 || axes->size() != 1 ||
      steps->size() != 1 || (*steps)[0] != 1)
    return std::nullopt;
  int64_t a = (*axes)[0] < 0 ? (*axes)[0] + rank : (*axes)[0];
  if (a < 0 || a >= rank || (*axis >= 0 && a != *axis)) return std::nullopt;
  const Dim& d = n->outputs[0]->shape[size_t(a)];
  if (!d.is_const()) return std::nullopt;
  *axis = a, *size = d.value();
  auto clamp = [&](int64_t i) { return std::clamp(i < 0 ? i + *size : i, int64_t(0), *size); };
  return Part{clamp((*starts)[0]), clamp((*ends)[0]), n->input(0)};
}

class SliceGradsToConcat : public Pass {
 public:
  std::string name() const override { return "slice_grads_to_concat"; }
  bool apply(ir::Graph& g) const override {
    std::vector<const ir::Node*> gone;
    for (ir::Node* sum : nodes_of(g, "Sum")) {
      if (sum->inputs.size() < 2 || !has_inputs(sum, sum->inputs.size()) || !sum->outputs[0] ||
          !sum->outputs[0]->has_shape)
        continue;
      const int64_t rank = int64_t(sum->outputs[0]->shape.size());
      int64_t axis = -1, size = 0;
      std::vector<Part> parts;
      const ir::Value* shape = nullptr;  // (every part's SliceGrad reads the same shape: the sliced tensor's)
      for (ir::Value* v : sum->inputs) {
        ir::Node* n = v->producer;
        auto p = sole_reader(g, v, sum) ? part_of(n, rank, &axis, &size) : std::nullopt;
        if (!p || (shape && n->input(1) != shape) || v->dtype != sum->outputs[0]->dtype) {
          parts.clear();
          break;
        }
        shape = n->input(1);
        parts.push_back(*p);
      }
      std::sort(parts.begin(), parts.end(), [](const Part& a, const Part& b) { return a.begin < b.begin; });
      int64_t next = 0;
      for (const Part& p : parts) next = p.begin == next ? p.end : -1;
      if (parts.empty() || next != size) continue;  // (not consecutive parts covering the whole axis)
      std::vector<ir::Value*> dys;
      for (const Part& p : parts)
        if (p.end > p.begin) dys.push_back(p.dy);
      add_fused(g, "", 13, "Concat", dys, {sum->outputs[0]}, g.unique_name(sum->name + "_concat"), sum->backward,
                {{"axis", axis}});
      gone.push_back(sum);
      for (ir::Value* v : sum->inputs) gone.push_back(v->producer);
    }
    return remove_all(g, gone, true);
  }
};

}  // namespace

std::unique_ptr<Pass> slice_grads_to_concat() { return std::make_unique<SliceGradsToConcat>(); }

}  // namespace onnxtrain::passes
