// Dead-code elimination: removes nodes none of whose outputs is read by a live node or is a graph output, and leaves
// out the outputs nothing reads where their op may omit them (Op::omittable_output: its kernel skips their work).
#include <set>

#include "ops/op.h"
#include "passes/pass.h"

namespace onnxtrain::passes {
namespace {

class DeadCode : public Pass {
 public:
  std::string name() const override { return "dead_code"; }
  bool apply(ir::Graph& g) const override {
    std::set<const ir::Node*> live;
    std::set<const ir::Value*> needed(g.outputs.begin(), g.outputs.end());
    bool changed = false;
    for (auto it = g.nodes().rbegin(); it != g.nodes().rend(); ++it) {
      ir::Node* n = it->get();
      bool used = false;
      for (const ir::Value* v : n->outputs) used = used || (v && needed.count(v));
      if (!used) continue;
      live.insert(n);
      for (size_t i = 0; i < n->outputs.size(); ++i) {
        ir::Value* v = n->outputs[i];
        if (!v || needed.count(v) || !n->op || !n->op->omittable_output(i)) continue;
        v->producer = nullptr;
        n->outputs[i] = nullptr;
        changed = true;
      }
      for (const ir::Value* v : n->inputs)
        if (v) needed.insert(v);
    }
    size_t before = g.nodes().size();
    g.remove_nodes([&](const ir::Node& n) { return !live.count(&n); });
    return changed || g.nodes().size() != before;
  }
};

}  // namespace

std::unique_ptr<Pass> dead_code() { return std::make_unique<DeadCode>(); }

}  // namespace onnxtrain::passes
