// The schedule: the one place that decides the order a (training) graph runs in. The forward part first, in the
// graph's order with every node after its producers, each Shape/Size of a forward value right after that value is
// made (so that backward keeps a few integers, not the value); then the backward part, each node after its
// producers, a node that reads only what forward left (a recompute clone), and the nodes reading its output but for
// what forward left and the caller's gradients, just before their first reader and no earlier. Autodiff, the passes
// and the memory optimizer add nodes; none of them orders the run.
#pragma once
#include <cstddef>
#include <vector>

#include "ir/graph.h"

namespace onnxtrain::memory {

struct Schedule {
  std::vector<const ir::Node*> order;
  size_t boundary = 0;  // order[0, boundary) is the forward part
};

Schedule schedule(const ir::Graph& g);

}  // namespace onnxtrain::memory
