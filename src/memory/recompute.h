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
#include "memory/budget.h"

namespace onnxtrain::memory {

// Values made by the forward part and read by the backward part (graph inputs and parameters excluded).
std::vector<const ir::Value*> stashed_values(const ir::Graph& g);

struct Candidate {
  const ir::Value* target = nullptr;   // the stashed activation it saves
  std::vector<const ir::Node*> nodes;  // the subgraph recomputing it, in forward order
  std::string cluster;                 // op types in order, each followed by '+'
  Dim bytes;                           // stash bytes saved: target's, less what a compromise keeps
  Dim flops;                           // recompute work
  // Recompute cost the budget minimises: flops plus kBytesCost per byte the subgraph reads and writes
  // (elementwise recompute is bound by memory traffic, not arithmetic).
  Dim cost;
  // A compromised plan: the walk stopped at up-casts (Cast to a wider type) whose narrower inputs, in
  // `kept`, are stashed instead of being recomputed.
  bool compromise = false;
  std::vector<const ir::Value*> kept;
};
constexpr int64_t kBytesCost = 8;

// One candidate per stashed activation whose producer chain is recomputable within `node_cap` nodes; for a
// stashed activation without one, a compromised candidate when stopping at up-casts makes one.
std::vector<Candidate> find_candidates(const ir::Graph& g, size_t node_cap = 12);

// One entry of a config: ClusterId:Strategy:Count (strategy 0 off, 1 recompute, 2 recompute with compromise;
// count -1 = all, N = first N).
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
  bool compromise = false;
  int64_t frequency = 0, requested = 0, applied = 0;
  Dim bytes, flops;  // per occurrence
  std::string config() const { return cluster + (compromise ? ":2:-1" : ":1:-1"); }
};
struct RecomputeReport {
  std::vector<ClusterReport> clusters;
  std::string budget;  // how a budget was met, or by how much it missed (empty without one)
  int64_t saved = 0;   // stash bytes the budget's plans save (save_bytes, stash_fraction)
  bool met = true;     // false: even every plan saves less than the budget asks
  std::string level;   // what a level did (layers found), empty at level 0
  int64_t every_level = 0;  // plans taken at every level (casts, stash choices by size) ...
  Dim every_level_bytes;    // ... and the stash bytes they save
  // A table: cluster, frequency, status, bytes saved (symbolic and for `dims`), recompute flops, config entry.
  std::string str(const Bindings& dims = {}) const;
  std::string json(const Bindings& dims = {}) const;
};

struct RecomputeOptions {
  std::vector<ConfigEntry> config;
  // As MemoryOptions::level (memory/options.h, where the levels' meaning is written): 0, 1 (layer-wise
  // checkpointing) or 2 (with the compromised plans). (Middle grounds are budgets, stash_fraction and save_bytes:
  // the plans cheapest per byte saved come first, the elementwise chains that read the products' outputs.)
  int level = 0;
  // Further plans, the cheapest that keep at most this fraction of the stash (0: none), ...
  double stash_fraction = 0;
  // ... or the cheapest that save at least this many bytes of stash (how memory::plan_training searches for
  // the plans that meet a budget on the step's peak, which only a schedule and an allocation plan can predict).
  int64_t save_bytes = 0;
  Bindings dims;  // the batch a budget's sizes are evaluated for
};

// Clones the chosen candidates (by config, level and budget) into the backward part, each clone before its
// first reader and with the original's random key, and reports every cluster.
RecomputeReport apply_recompute(ir::Graph& g, const RecomputeOptions& options);

}  // namespace onnxtrain::memory
