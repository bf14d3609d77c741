// Gradients an optimizer consumes inside backward (onnxtrain.optim's in_backward=True): for each, the step after
// which it is final and its parameter (or a view of it) is read no more, so that the parameter may be updated in
// place there and its gradient freed at once. The allocation plan frees such a gradient after that step, so the
// prediction holds only the gradients not yet applied.
#pragma once
#include <set>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace onnxtrain::memory {

// Per `wrt` entry: its handoff step in `order`, or -1 where it has none (not in `applied`; its gradient made by
// no step, as an input's passed through to it; or a gradient shared with another entry).
std::vector<int> handoff_steps(const ir::Graph& g, const std::vector<const ir::Node*>& order,
                               const std::vector<std::string>& wrt, const std::vector<ir::Value*>& grads,
                               const std::set<std::string>& applied);

}  // namespace onnxtrain::memory
