#include "memory/schedule.h"

#include <set>

namespace onnxtrain::memory {
namespace {

bool hoisted(const ir::Node& n) { return !n.backward && (n.op_type == "Shape" || n.op_type == "Size") && n.input(0); }

class Scheduler {
 public:
  explicit Scheduler(const ir::Graph& g) : g_(g) {}

  Schedule run() {
    for (auto& n : g_.nodes())  // shapes of inputs and parameters: first of all
      if (hoisted(*n) && !n->input(0)->producer) emit(*n);
    for (auto& n : g_.nodes())
      if (!n->backward) emit(*n);
    s_.boundary = s_.order.size();
    for (auto& n : g_.nodes()) emit(*n);
    return std::move(s_);
  }

 private:
  // n after its producers (a backward node's forward producers have run already).
  void emit(const ir::Node& n) {
    if (done_.count(&n)) return;
    done_.insert(&n);
    for (const ir::Value* v : n.inputs)
      if (v && v->producer) emit(*v->producer);
    s_.order.push_back(&n);
    if (n.backward) return;
    for (const ir::Value* v : n.outputs)
      if (v)
        for (const ir::Node* c : v->consumers)
          if (hoisted(*c) && c->input(0) == v) emit(*c);
  }

  const ir::Graph& g_;
  Schedule s_;
  std::set<const ir::Node*> done_;
};

}  // namespace

Schedule schedule(const ir::Graph& g) { return Scheduler(g).run(); }

}  // namespace onnxtrain::memory
