#include "passes/running_statistics.h"

#include <algorithm>

namespace onnxtrain::passes {

std::map<std::string, std::string> expose_running_statistics(ir::Graph& g, const std::set<std::string>& inputs,
                                                             bool unbiased) {
  std::map<std::string, std::string> updates;
  for (auto& n : g.nodes()) {
    if (n->op_type != "BatchNormalization" || !n->attr_int("training_mode", 0)) continue;
    bool any = false;
    for (size_t i = 1; i <= 2; ++i) {  // outputs 1 and 2 update inputs 3 (mean) and 4 (variance)
      const ir::Value* stat = n->input(2 + i);
      if (!stat || !inputs.count(stat->name)) continue;
      any = true;
      if (n->outputs.size() <= i) n->outputs.resize(i + 1, nullptr);
      ir::Value*& out = n->outputs[i];
      if (!out) {
        out = g.add_value(g.unique_name(stat->name + ".updated"));
        out->producer = n.get();
      }
      if (std::find(g.outputs.begin(), g.outputs.end(), out) == g.outputs.end()) g.outputs.push_back(out);
      updates[out->name] = stat->name;
    }
    if (any && unbiased) n->attrs["unbiased_running_var"] = int64_t(1);
  }
  return updates;
}

}  // namespace onnxtrain::passes
