// Which recompute plans a training graph gets: the config's entries, the level's layers, the plans taken at every
// level (casts, and the stash choices by size that cost at most a flop per byte saved), then a budget's cheapest.
#pragma once
#include <vector>

#include "memory/layers.h"
#include "memory/recompute.h"

namespace onnxtrain::memory {

struct Picks {
  std::vector<bool> pick;         // per candidate: chosen, for any of the reasons below
  std::vector<bool> by_config;    // the config's choices
  std::vector<bool> every_level;  // taken at every level, level 0 included
};

// The candidates chosen by `o` (config, level, budget); the report gets the budget's text, saved and met.
Picks choose_plans(const ir::Graph& g, const std::vector<Candidate>& candidates, const RecomputeOptions& o,
                   const Layers& layers, RecomputeReport* report);

}  // namespace onnxtrain::memory
