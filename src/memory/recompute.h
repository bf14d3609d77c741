// The memory optimizer's recompute plans: the activations a training graph
// stashes for its backward part, the subgraphs that could recompute each of
// them in backward from values alive anyway, grouped into clusters
// ("Add+Gelu+"), the user's choice in ONNX Runtime's config grammar, and the
// rewrite that clones chosen subgraphs into the backward part.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "core/dim.h"
#include "ir/graph.h"

namespace onnxtrain::memory {

// Values made by the forward part and read by the backward part (graph inputs and parameters excluded).
std::vector<const ir::Value*> stashed_values(const ir::Graph& g);

struct Candidate {
  const ir::Value* target = nullptr;     // the stashed activation it saves
  std::vector<const ir::Node*> nodes;    // the subgraph recomputing it, in forward order
  std::string cluster;                   // op types in order, each followed by '+'
  Dim bytes;                             // bytes of `target` no longer stashed
  Dim flops;                             // recompute work
};

// One candidate per stashed activation whose producer chain is recomputable within `node_cap` nodes.
std::vector<Candidate> find_candidates(const ir::Graph& g, size_t node_cap = 12);

// One entry of a config: ClusterId:Strategy:Count (strategy 0 off, 1 recompute; count -1 = all, N = first N).
struct ConfigEntry {
  std::string cluster;
  int strategy = 0;
  int64_t count = 0;
};
// "Id:1:-1,Id2:0:0", or a path (existing, or ending in .json) to a JSON array of such strings; a
// duplicate id: the last wins.
// A malformed entry, unknown strategy, bad count or missing file is a ConfigError quoting the entry.
std::vector<ConfigEntry> parse_config(const std::string& text);

struct ClusterReport {
  std::string cluster, shape;
  int64_t frequency = 0, requested = 0, applied = 0;
  Dim bytes, flops;  // per occurrence
};
struct RecomputeReport {
  std::vector<ClusterReport> clusters;
  std::string budget;  // how a budget was met, or by how much it missed (empty without one)
  std::string level;   // what a level did (layers found), empty at level 0
  // A table: cluster, frequency, status, bytes saved (symbolic and for `dims`), recompute flops, config entry.
  std::string str(const Bindings& dims = {}) const;
  std::string json(const Bindings& dims = {}) const;
};

// A budget: keep at most `stash_fraction` of the stash (evaluated for `dims`), recomputing
// the set of candidates with the least total flops that saves enough (an exact knapsack over
// the candidates' sizes; matmul-heavy plans are chosen only when cheaper ones cannot meet it).
struct Budget {
  double stash_fraction = 1.0;
  Bindings dims;
};
struct BudgetChoice {
  std::vector<size_t> chosen;  // indices into the candidates
  int64_t stash = 0, need = 0, saved = 0;
  bool met = false;
};
BudgetChoice choose_for_budget(const std::vector<Candidate>& candidates, const ir::Graph& g, const Budget& budget);

// Transformer layers, detected from structure: each starts at a LayerNormalization whose input is a
// residual stream (an Add's output, or read by an Add) and whose output reaches a Softmax before any
// other LayerNormalization; it ends where the next one starts. Returns the starting nodes, in order.
std::vector<const ir::Node*> detect_layers(const ir::Graph& g);

// Clones the chosen candidates (by config, level, and budget when given) into the backward part,
// each clone before its first reader and with the original's random key, and reports every cluster.
RecomputeReport apply_recompute(ir::Graph& g, const std::vector<ConfigEntry>& config, const Budget* budget = nullptr,
                                int level = 0);

}  // namespace onnxtrain::memory
