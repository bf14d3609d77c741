#include "memory/recompute_choice.h"

#include <algorithm>
#include <map>
#include <sstream>

#include "onnxtrain/error.h"

namespace onnxtrain::memory {
namespace {

// One Cast: a parameter (or input) cast to another dtype (autocast's bf16 weights), or an up-cast whose narrower
// input is stashed instead (bf16 logits cast to float32 for the loss; a compromise of one Cast is an up-cast's):
// a copy's work.
bool cast(const Candidate& c) {
  if (c.nodes.size() != 1 || c.nodes[0]->op_type != "Cast" || !c.nodes[0]->input(0)) return false;
  return c.compromise || !c.nodes[0]->input(0)->producer;
}

// A stash choice made by size: a plain plan (it reads only values stashed anyway) that costs at most a flop per byte
// it saves at every size. An RMSNorm's, LayerNorm's or GELU's output recomputed from the input their gradients keep,
// say: a pass over that input in backward instead of a second activation of its size held from forward to backward.
bool by_size(const Candidate& c, const Layers& layers) {
  return !c.compromise && !layers.has_input(c.target) && (c.bytes - c.flops).provably_non_negative();
}

// The config's and the level's choices, and those made at every level unless the config names their cluster.
// Inside the layers but for their inputs, level 1 chooses every plain candidate (layer-wise checkpointing, as
// ONNX Runtime's level 1), level 2 the compromised ones too.
Picks choose_by_config_and_level(const std::vector<Candidate>& candidates, const RecomputeOptions& o,
                                 const Layers& layers) {
  Picks p{std::vector<bool>(candidates.size()), std::vector<bool>(candidates.size()),
          std::vector<bool>(candidates.size())};
  std::map<std::string, int64_t> counted;  // cluster -> occurrences the config took so far (forward order)
  for (size_t i = 0; i < candidates.size(); ++i) {
    const Candidate& c = candidates[i];
    auto e = std::find_if(o.config.begin(), o.config.end(), [&](auto& x) { return x.cluster == c.cluster; });
    bool allowed = e != o.config.end() && (e->strategy == 2 || (e->strategy == 1 && !c.compromise));
    if (allowed && (e->count == -1 || counted[c.cluster] < e->count)) {
      counted[c.cluster]++;
      p.pick[i] = p.by_config[i] = true;
    }
    if (e == o.config.end() && (cast(c) || by_size(c, layers))) {
      p.pick[i] = p.every_level[i] = true;
      continue;
    }
    bool switched_off = e != o.config.end() && e->strategy == 0;  // the config overrides the level
    bool level_allows = o.level == 2 || (o.level == 1 && !c.compromise);
    if (level_allows && !switched_off && layers.nodes.count(c.target->producer) && !layers.has_input(c.target))
      p.pick[i] = true;
  }
  return p;
}

int64_t eval_or_throw(const Dim& d, const Bindings& dims, const std::string& what) {
  auto v = d.eval(dims);
  if (!v) throw ConfigError("memory budget: the size of " + what + " (" + d.str() + ") needs dims that were not given");
  return *v;
}

// Adds to the picks the cheapest further plans that save what the options ask: bytes beyond the picks so far, or
// a fraction of the stash kept, the stash as every level keeps it (the plans made at every level applied); the
// report says how much they save and whether that is enough. Layer inputs are not offered: they are the
// checkpoints every layer's recompute starts from.
void choose_for_budget(const ir::Graph& g, const std::vector<Candidate>& candidates, const RecomputeOptions& o,
                       const Layers& layers, Picks* p, RecomputeReport* report) {
  std::vector<Item> items;
  std::vector<size_t> index;  // items -> candidates
  int64_t saved_anyway = 0, saved_at_every_level = 0;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (!p->pick[i] && layers.has_input(candidates[i].target)) continue;
    int64_t bytes = eval_or_throw(candidates[i].bytes, o.dims, "'" + candidates[i].target->name + "'");
    if (p->pick[i]) {
      (p->every_level[i] ? saved_at_every_level : saved_anyway) += bytes;
      continue;
    }
    items.push_back({bytes, eval_or_throw(candidates[i].cost, o.dims, "a recompute cost")});
    index.push_back(i);
  }
  if (o.stash_fraction <= 0) {  // bytes to save, beyond what config and level save
    Choice c = choose_cheapest(items, o.save_bytes);
    for (size_t k : c.chosen) p->pick[index[k]] = true;
    report->saved = c.saved, report->met = c.met;
    return;
  }
  int64_t stash = -saved_at_every_level;
  for (const ir::Value* v : stashed_values(g)) stash += eval_or_throw(v->bytes(), o.dims, "'" + v->name + "'");
  int64_t need = std::max<int64_t>(0, stash - int64_t(o.stash_fraction * double(stash)));
  Choice c = choose_cheapest(items, need - saved_anyway);
  for (size_t k : c.chosen) p->pick[index[k]] = true;
  report->saved = c.saved + saved_anyway, report->met = c.met;
  std::ostringstream os;
  os << "budget " << Budget{o.stash_fraction, 0}.str() << ": of a " << mib(stash) << " stash, save " << mib(need)
     << "; the plans chosen save " << mib(report->saved)
     << (c.met ? "" : " (missed by " + mib(need - saved_anyway - c.saved) + ")");
  report->budget = os.str();
}

}  // namespace

Picks choose_plans(const ir::Graph& g, const std::vector<Candidate>& candidates, const RecomputeOptions& o,
                   const Layers& layers, RecomputeReport* report) {
  Picks p = choose_by_config_and_level(candidates, o, layers);
  if (o.stash_fraction > 0 || o.save_bytes > 0) choose_for_budget(g, candidates, o, layers, &p, report);
  return p;
}

}  // namespace onnxtrain::memory
