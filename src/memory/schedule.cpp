#include "memory/schedule.h"

#include <algorithm>
#include <set>

namespace onnxtrain::memory {
namespace {

bool hoisted(const ir::Node& n) { return !n.backward && (n.op_type == "Shape" || n.op_type == "Size") && n.input(0); }

// A gradient the caller passes in: a graph input that only backward reads.
bool output_gradient(const ir::Value& v) {
  return !v.producer && !v.consumers.empty() &&
         std::all_of(v.consumers.begin(), v.consumers.end(), [](const ir::Node* c) { return c->backward; });
}

// The backward nodes that wait for their first reader: those reading only what forward left (a recompute clone),
// and those reading such a node's output besides what forward left and the caller's gradients (a product of a
// recomputed head's dW and the loss's gradient). Nothing of the backward chain waits for them: run where the list
// has them, a tied head's dW would be formed at the start of backward and held to its end, beside the stash.
std::set<const ir::Node*> waiting(const ir::Graph& g) {
  std::set<const ir::Node*> w;
  for (auto& n : g.nodes()) {  // (producers come before readers in the list)
    if (!n->backward) continue;
    bool left = true, reads_waiting = false, reads_gradient = false;
    for (const ir::Value* v : n->inputs) {
      if (!v) continue;
      const bool made_in_backward = v->producer && v->producer->backward;
      left = left && (!made_in_backward || w.count(v->producer));
      reads_waiting = reads_waiting || (made_in_backward && w.count(v->producer));
      reads_gradient = reads_gradient || output_gradient(*v);
    }
    if (left && (reads_waiting || !reads_gradient)) w.insert(n.get());
  }
  return w;
}

class Scheduler {
 public:
  explicit Scheduler(const ir::Graph& g) : g_(g), waiting_(waiting(g)) {}

  Schedule run() {
    for (auto& n : g_.nodes())  // shapes of inputs and parameters: first of all
      if (hoisted(*n) && !n->input(0)->producer) emit(*n);
    for (auto& n : g_.nodes())
      if (!n->backward) emit(*n);
    s_.boundary = s_.order.size();
    for (auto& n : g_.nodes())
      if (!waiting_.count(n.get())) emit(*n);
    for (auto& n : g_.nodes()) emit(*n);  // what waited for a reader that never came: at the end
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
  const std::set<const ir::Node*> waiting_;
  Schedule s_;
  std::set<const ir::Node*> done_;
};

}  // namespace

Schedule schedule(const ir::Graph& g) { return Scheduler(g).run(); }

}  // namespace onnxtrain::memory
