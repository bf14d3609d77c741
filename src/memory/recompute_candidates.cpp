// The memory optimizer's candidates: each stashed activation and the subgraph that could recompute it in backward
// from values alive anyway, with its bytes saved and its cost.
#include <algorithm>
#include <set>

#include "memory/recompute.h"
#include "ops/op.h"

namespace onnxtrain::memory {

static bool read_in_backward(const ir::Value* v) {
  for (const ir::Node* c : v->consumers)
    if (c->backward) return true;
  return false;
}

std::vector<const ir::Value*> stashed_values(const ir::Graph& g) {
  std::vector<const ir::Value*> r;
  for (auto& n : g.nodes())
    if (!n->backward)
      for (const ir::Value* v : n->outputs)
        if (v && read_in_backward(v)) r.push_back(v);
  return r;
}

// Whether a view of v (a Reshape, ..., of it, or of such a view) but `target` is stashed: it holds v's storage in
// backward, so recomputing v frees nothing.
static bool view_stashed(const ir::Value* v, const ir::Value* target = nullptr) {
  for (const ir::Node* c : v->consumers)
    if (!c->backward && c->op && c->op->is_view() && c->outputs[0] && c->outputs[0] != target &&
        (read_in_backward(c->outputs[0]) || view_stashed(c->outputs[0], target)))
      return true;
  return false;
}

static bool is_upcast(const ir::Node* n) {
  return n->op_type == "Cast" && n->input(0) && n->outputs[0] &&
         dtype_size(n->outputs[0]->dtype) > dtype_size(n->input(0)->dtype);
}

// A shape or index list: an integer tensor of at most 64 elements. Stashing it costs nothing worth saving, so a
// walk stops there instead of following the shape arithmetic (Shape, Gather, Concat) back to activations.
static bool small_integers(const ir::Value* u) {
  if (dtype_is_float(u->dtype) || !u->has_shape) return false;
  auto n = shape_numel(u->shape).eval({});
  return n && *n <= 64;
}

// The nodes recomputing `target` from values free in backward (graph inputs, parameters, constants, values stashed
// anyway or whose views are, small integer tensors), or false. With `compromise`, a walk stops at up-casts, the
// narrower inputs going to `kept`.
static bool walk(const ir::Value* target, size_t node_cap, bool compromise, std::set<const ir::Node*>* chosen,
                 std::vector<const ir::Value*>* kept) {
  std::vector<const ir::Node*> todo = {target->producer};
  while (!todo.empty()) {
    const ir::Node* n = todo.back();
    todo.pop_back();
    if (chosen->count(n)) continue;
    if (!n->op || !n->op->recomputable() || chosen->size() >= node_cap) return false;
    chosen->insert(n);
    for (const ir::Value* u : n->inputs) {
      if (!u || !u->producer || u->producer->backward || read_in_backward(u) || view_stashed(u, target) ||
          small_integers(u))
        continue;
      if (compromise && is_upcast(n)) {
        if (std::find(kept->begin(), kept->end(), u) == kept->end()) kept->push_back(u);
        continue;
      }
      todo.push_back(u->producer);
    }
  }
  return true;
}

// `n` as its recompute clone runs: without the outputs its op may omit (Op::omittable_output) that neither are the
// target nor feed the plan's other nodes (the dead_code pass leaves them out of the clone).
static ir::Node as_cloned(const ir::Node& n, const ir::Value* target, const std::set<const ir::Node*>& chosen) {
  ir::Node clone = n;
  for (size_t i = 0; i < clone.outputs.size(); ++i) {
    const ir::Value* v = clone.outputs[i];
    if (!v || v == target || !n.op->omittable_output(i)) continue;
    if (std::none_of(v->consumers.begin(), v->consumers.end(), [&](const ir::Node* c) { return chosen.count(c); }))
      clone.outputs[i] = nullptr;
  }
  return clone;
}

std::vector<Candidate> find_candidates(const ir::Graph& g, size_t node_cap) {
  std::vector<Candidate> out;
  for (const ir::Value* target : stashed_values(g)) {
    if (view_stashed(target)) continue;
    std::set<const ir::Node*> chosen;
    std::vector<const ir::Value*> kept;
    bool compromise = false;
    if (is_upcast(target->producer) && target->producer->inputs[0]->producer) {
      // An up-cast's output (autocast's float32 islands): cast again from the narrower input, never the chain
      // (a GEMM, typically) behind it, hundreds of times the work per byte saved.
      chosen.insert(target->producer);
      kept.push_back(target->producer->inputs[0]);
      compromise = true;
    } else if (!walk(target, node_cap, false, &chosen, &kept)) {
      chosen.clear();
      if (!walk(target, node_cap, true, &chosen, &kept) || kept.empty()) continue;
      compromise = true;
    }
    // Views alone (Reshape, ...) share the storage of what they view, which stays anyway (the walk stopped there):
    // recomputing them saves nothing.
    if (std::all_of(chosen.begin(), chosen.end(), [](const ir::Node* n) { return n->op->is_view(); })) continue;
    Candidate c;
    c.target = target;
    c.compromise = compromise;
    c.kept = kept;
    for (auto& n : g.nodes())
      if (chosen.count(n.get())) c.nodes.push_back(n.get());  // forward order
    c.flops = Dim(0);
    Dim moved(0);
    for (const ir::Node* n : c.nodes) {
      c.cluster += n->op_type + "+";
      const ir::Node clone = as_cloned(*n, target, chosen);
      c.flops = c.flops + n->op->flops(clone);
      for (const ir::Value* v : clone.inputs)
        if (v) moved = moved + v->bytes();
      for (const ir::Value* v : clone.outputs)
        if (v) moved = moved + v->bytes();
    }
    c.cost = c.flops + moved * Dim(kBytesCost);
    c.bytes = target->bytes();
    for (const ir::Value* v : kept) c.bytes = c.bytes - v->bytes();
    out.push_back(c);
  }
  return out;
}

}  // namespace onnxtrain::memory
