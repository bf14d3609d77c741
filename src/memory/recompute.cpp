// The memory optimizer's rewrite: the chosen candidates cloned into the backward part.
#include "memory/recompute.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "memory/layers.h"
#include "memory/recompute_choice.h"
#include "onnxtrain/error.h"
#include "passes/pass.h"

namespace onnxtrain::memory {

// What earlier rewrites made: every cloned value, and every cloned node. A later clone reads
// cloned values instead of forward ones (so every recomputed target really leaves the stash), but for the
// checkpoints (layer inputs: stashed, so that recomputing a layer never recomputes the ones before it), and a node
// already cloned (another output of LayerNormalization, say) is not cloned again.
struct Clones {
  std::map<const ir::Value*, ir::Value*> values;
  std::set<const ir::Node*> nodes;
  const Layers& layers;
};

static void clone_into_backward(ir::Graph& g, const Candidate& c, Clones& done) {
  std::map<const ir::Value*, ir::Value*>& clone_of = done.values;
  std::vector<ir::Node*> clones;
  for (const ir::Node* n : c.nodes) {
    if (done.nodes.count(n)) continue;
    done.nodes.insert(n);
    std::vector<ir::Value*> ins, outs;
    for (ir::Value* u : n->inputs) ins.push_back(u && clone_of.count(u) && !done.layers.has_input(u) ? clone_of[u] : u);
    for (ir::Value* v : n->outputs) {
      if (!v) {
        outs.push_back(nullptr);
        continue;
      }
      ir::Value* w = g.add_value(g.unique_name(v->name + "_recompute"));
      w->dtype = v->dtype;
      w->shape = v->shape;
      w->has_shape = v->has_shape;
      w->sym_value = v->sym_value;
      clone_of[v] = w;
      outs.push_back(w);
    }
    ir::Node* k = g.add_node(n->op_type, ins, outs, n->attrs, g.unique_name(n->name + "_recompute"));
    k->domain = n->domain;
    k->opset = n->opset;
    k->op = n->op;
    k->backward = true;
    k->random_key = n->key();  // the same dropout mask
    clones.push_back(k);
  }
  // Backward readers of the target read the clone (the schedule runs the clones just before the first of them).
  ir::Value* target = const_cast<ir::Value*>(c.target);
  ir::Value* clone = clone_of.at(target);
  std::set<const ir::Node*> rewired;
  for (auto& n : g.nodes()) {
    if (!n->backward || std::find(clones.begin(), clones.end(), n.get()) != clones.end()) continue;
    for (ir::Value*& in : n->inputs)
      if (in == target) in = clone, rewired.insert(n.get());
    if (rewired.count(n.get())) clone->consumers.push_back(n.get());
  }
  target->consumers.erase(std::remove_if(target->consumers.begin(), target->consumers.end(),
                                         [&](const ir::Node* n) { return rewired.count(n) != 0; }),
                          target->consumers.end());
}

static void rewrite(ir::Graph& g, const std::vector<Candidate>& candidates, const std::vector<bool>& pick,
                    const Layers& layers) {
  Clones done{{}, {}, layers};
  for (size_t i = 0; i < candidates.size(); ++i)
    if (pick[i]) clone_into_backward(g, candidates[i], done);
  if (done.nodes.empty()) return;
  g.sort_nodes();  // the node list stays topologically sorted for the passes
  passes::gelu_recompute_fusion()->apply(g);
  // what only backward read and is now recomputed there leaves forward, and each clone forms only what is read
  passes::dead_code()->apply(g);
}

RecomputeReport apply_recompute(ir::Graph& g, const RecomputeOptions& o) {
  if (o.level < 0 || o.level > 2)
    throw ConfigError("memory optimizer level " + std::to_string(o.level) + " is not 0, 1 or 2");
  auto candidates = find_candidates(g);
  RecomputeReport report;
  std::vector<size_t> row_of;         // candidate -> report row
  std::map<std::string, size_t> row;  // cluster + shape + kind -> report row
  for (auto& c : candidates) {
    std::string shape = c.target->has_shape ? shape_str(c.target->shape) : "?";
    auto [it, fresh] = row.emplace(c.cluster + shape + (c.compromise ? "~" : ""), report.clusters.size());
    if (fresh) report.clusters.push_back(ClusterReport{c.cluster, shape, c.compromise, 0, 0, 0, c.bytes, c.flops});
    report.clusters[it->second].frequency++;
    row_of.push_back(it->second);
  }
  const Layers layers = detect_layers(g);  // (their inputs are checkpoints for every plan)
  if (o.level > 0) {
    std::ostringstream os;
    os << "level " << o.level << ": " << layers.count() << " transformer layers";
    if (layers.count())
      os << "; each recomputed in backward from its input (layer-wise checkpointing"
         << (o.level == 2 ? ", compromised plans too)" : ")");
    else
      os << " found (no attention whose output joins a residual stream): nothing recomputed";
    report.level = os.str();
  }
  Picks p = choose_plans(g, candidates, o, layers, &report);
  for (size_t i = 0; i < candidates.size(); ++i) {
    ClusterReport& r = report.clusters[row_of[i]];
    r.applied += p.pick[i];
    r.requested += p.by_config[i] || p.pick[i];  // the config's, the level's, every level's and the budget's picks
    if (!p.every_level[i]) continue;
    report.every_level++;
    report.every_level_bytes = report.every_level_bytes + candidates[i].bytes;
  }
  for (auto& r : report.clusters) {  // the config may ask for more occurrences than exist
    auto e = std::find_if(o.config.begin(), o.config.end(), [&](auto& x) { return x.cluster == r.cluster; });
    bool asks = e != o.config.end() && (e->strategy == 2 || (e->strategy == 1 && !r.compromise));
    if (asks && e->count > r.frequency) r.requested += e->count - r.frequency;
  }
  rewrite(g, candidates, p.pick, layers);
  return report;
}

}  // namespace onnxtrain::memory
