// CastLike to Cast: CastLike reads its second input for a dtype alone, which every value's is known here, so it
// becomes Cast(to = that dtype). The value it read loses a reader it never needed: a fusion may then take it (the
// scores' product whose dtype the exporters' scale of 1 / sqrt(head size) is cast to), and the step need not keep
// it for the cast.
#include "passes/pass.h"

namespace onnxtrain::passes {
namespace {

class CastLikeToCast : public Pass {
 public:
  std::string name() const override { return "cast_like_to_cast"; }
  bool apply(ir::Graph& g) const override {
    std::vector<const ir::Node*> gone;
    for (ir::Node* n : nodes_of(g, "CastLike")) {
      if (!has_inputs(n, 2) || n->outputs.size() != 1 || n->input(1)->dtype == DType::kUndefined) continue;
      add_fused(g, "", 19, "Cast", {n->input(0)}, {n->outputs[0]}, g.unique_name(n->name + "_cast"), n->backward,
                {{"to", int64_t(n->input(1)->dtype)}});
      gone.push_back(n);
    }
    return remove_all(g, gone, true);
  }
};

}  // namespace

std::unique_ptr<Pass> cast_like_to_cast() { return std::make_unique<CastLikeToCast>(); }

}  // namespace onnxtrain::passes
