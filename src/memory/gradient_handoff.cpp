#include "memory/gradient_handoff.h"

#include <algorithm>
#include <map>

#include "ops/op.h"

namespace onnxtrain::memory {

// The last step reading `v` or a view of it (the plan's views share their input's buffer).
static int last_read(const ir::Value* v, const std::map<const ir::Node*, int>& step_of) {
  int last = -1;
  std::vector<const ir::Value*> todo{v};
  while (!todo.empty()) {
    const ir::Value* a = todo.back();
    todo.pop_back();
    for (const ir::Node* c : a->consumers) {
      auto s = step_of.find(c);
      if (s == step_of.end()) continue;
      last = std::max(last, s->second);
      if (c->op && c->op->is_view() && !c->inputs.empty() && c->inputs[0] == a && !c->outputs.empty() &&
          c->outputs[0])
        todo.push_back(c->outputs[0]);
    }
  }
  return last;
}

std::vector<int> handoff_steps(const ir::Graph& g, const std::vector<const ir::Node*>& order,
                               const std::vector<std::string>& wrt, const std::vector<ir::Value*>& grads,
                               const std::set<std::string>& applied) {
  std::map<const ir::Node*, int> step_of;
  for (size_t s = 0; s < order.size(); ++s) step_of[order[s]] = int(s);
  std::map<const ir::Value*, int> uses;
  for (const ir::Value* v : grads) uses[v]++;
  std::vector<int> r(wrt.size(), -1);
  for (size_t i = 0; i < wrt.size(); ++i) {
    const ir::Value* grad = grads[i];
    const ir::Value* param = g.find(wrt[i]);
    if (!applied.count(wrt[i]) || !grad || !param || uses[grad] > 1 || !grad->producer) continue;
    auto made = step_of.find(grad->producer);
    if (made == step_of.end()) continue;
    r[i] = std::max(made->second, last_read(param, step_of));
  }
  return r;
}

}  // namespace onnxtrain::memory
