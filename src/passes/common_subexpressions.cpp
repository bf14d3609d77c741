// Common-subexpression elimination: a node with the same op, attributes and
// inputs as an earlier one is replaced by it (random ops never are).
#include <map>
#include <sstream>

#include "ops/op.h"
#include "passes/pass.h"

namespace onnxtrain::passes {
namespace {

// A key that equal nodes share: op, domain, inputs, attributes (tensors by content).
std::string node_key(const ir::Node& n) {
  std::ostringstream os;
  os << n.domain << "|" << n.op_type << "|" << n.outputs.size() << "|";
  for (const ir::Value* v : n.inputs) os << (v ? v->name : "") << ",";
  for (auto& [k, a] : n.attrs) {
    os << "|" << k << "=" << a.index() << ":";
    std::visit(
        [&](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, Tensor>) {
            os << dtype_name(x.dtype()) << dims_str(x.dims());
            os.write(static_cast<const char*>(x.raw()), std::streamsize(x.nbytes()));
          } else if constexpr (std::is_arithmetic_v<T> || std::is_same_v<T, std::string>) {
            os << x;
          } else {
            for (auto& e : x) os << e << ";";
          }
        },
        a);
  }
  return os.str();
}

class CommonSubexpressions : public Pass {
 public:
  std::string name() const override { return "common_subexpressions"; }
  bool apply(ir::Graph& g) const override {
    std::map<std::string, ir::Node*> seen;
    std::vector<ir::Node*> dups;
    for (auto& n : g.nodes()) {
      if (n->op && n->op->is_random()) continue;
      auto [it, fresh] = seen.emplace(node_key(*n), n.get());
      if (fresh) continue;
      ir::Node* keep = it->second;
      bool outputs_kept = true;  // a graph output keeps its own producer
      for (ir::Value* v : n->outputs)
        outputs_kept = outputs_kept && !(v && std::find(g.outputs.begin(), g.outputs.end(), v) != g.outputs.end());
      if (!outputs_kept) continue;
      for (size_t i = 0; i < n->outputs.size(); ++i)
        if (n->outputs[i] && keep->outputs[i]) g.replace_uses(n->outputs[i], keep->outputs[i]);
      dups.push_back(n.get());
    }
    g.remove_nodes([&](const ir::Node& n) { return std::find(dups.begin(), dups.end(), &n) != dups.end(); });
    return !dups.empty();
  }
};

}  // namespace

std::unique_ptr<Pass> common_subexpressions() { return std::make_unique<CommonSubexpressions>(); }

}  // namespace onnxtrain::passes
