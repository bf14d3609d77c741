#include "memory/recompute.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "memory/layers.h"
#include "onnxtrain/error.h"
#include "ops/op.h"
#include "passes/pass.h"

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

// The nodes recomputing `target` from values free in backward (graph inputs, parameters, constants, values
// stashed anyway, small integer tensors), or false. With `compromise`, a walk stops at up-casts, the narrower inputs
// going to `kept`.
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
      if (!u || !u->producer || u->producer->backward || read_in_backward(u) || small_integers(u)) continue;
      if (compromise && is_upcast(n)) {
        if (std::find(kept->begin(), kept->end(), u) == kept->end()) kept->push_back(u);
        continue;
      }
      todo.push_back(u->producer);
    }
  }
  return true;
}

std::vector<Candidate> find_candidates(const ir::Graph& g, size_t node_cap) {
  std::vector<Candidate> out;
  for (const ir::Value* target : stashed_values(g)) {
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
      c.flops = c.flops + n->op->flops(*n);
      for (const ir::Value* v : n->inputs)
        if (v) moved = moved + v->bytes();
      for (const ir::Value* v : n->outputs)
        if (v) moved = moved + v->bytes();
    }
    c.cost = c.flops + moved * Dim(kBytesCost);
    c.bytes = target->bytes();
    for (const ir::Value* v : kept) c.bytes = c.bytes - v->bytes();
    out.push_back(c);
  }
  return out;
}

static ConfigEntry parse_entry(const std::string& entry) {
  auto bad = [&](const std::string& why) { return ConfigError("memory config entry '" + entry + "': " + why); };
  size_t a = entry.find(':'), b = a == std::string::npos ? a : entry.find(':', a + 1);
  if (a == std::string::npos || b == std::string::npos || entry.find(':', b + 1) != std::string::npos)
    throw bad("expected ClusterId:Strategy:Count");
  ConfigEntry e;
  e.cluster = entry.substr(0, a);
  if (e.cluster.empty()) throw bad("empty cluster id");
  std::string strategy = entry.substr(a + 1, b - a - 1), count = entry.substr(b + 1);
  if (strategy != "0" && strategy != "1" && strategy != "2")
    throw bad("strategy '" + strategy + "' is not 0 (off), 1 (recompute) or 2 (recompute with compromise)");
  e.strategy = strategy[0] - '0';
  try {
    size_t used = 0;
    e.count = std::stoll(count, &used);
    if (used != count.size() || e.count < -1) throw std::invalid_argument("");
  } catch (const std::exception&) {
    throw bad("count '" + count + "' is not -1 (all) or a number of occurrences >= 0");
  }
  return e;
}

std::vector<ConfigEntry> parse_config(const std::string& text) {
  std::vector<std::string> items;
  // A file: a path to a regular file or one ending in .json (a device or folder is never read); anything else is
  // an inline list.
  std::error_code ec;
  bool is_file =
      std::filesystem::is_regular_file(text, ec) || (text.size() > 5 && text.compare(text.size() - 5, 5, ".json") == 0);
  bool inline_list = !is_file;
  if (inline_list) {
    std::stringstream ss(text);
    for (std::string item; std::getline(ss, item, ',');) {
      item.erase(0, item.find_first_not_of(" \t"));
      item.erase(item.find_last_not_of(" \t") + 1);
      if (!item.empty()) items.push_back(item);
    }
  } else if (!text.empty()) {
    std::ifstream f(text);
    if (!f || !std::filesystem::is_regular_file(text, ec))
      throw ConfigError("memory config file '" + text + "' cannot be read");
    try {
      for (auto& e : nlohmann::json::parse(f)) items.push_back(e.get<std::string>());
    } catch (const nlohmann::json::exception& e) {
      throw ConfigError("memory config file '" + text + "': not a JSON array of strings (" + e.what() + ")");
    }
  }
  std::vector<ConfigEntry> r;
  for (auto& item : items) {
    ConfigEntry e = parse_entry(item);
    r.erase(std::remove_if(r.begin(), r.end(), [&](auto& x) { return x.cluster == e.cluster; }), r.end());
    r.push_back(e);  // a duplicate id: the last wins
  }
  return r;
}

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

// One Cast, recomputed at every level: a parameter (or input) cast to another dtype (autocast's bf16 weights), or an
// up-cast whose narrower input is stashed instead (bf16 logits cast to float32 for the loss): a copy's work.
static bool cast_at_every_level(const Candidate& c) {
  if (c.nodes.size() != 1 || c.nodes[0]->op_type != "Cast" || !c.nodes[0]->input(0)) return false;
  return c.compromise ? is_upcast(c.nodes[0]) : !c.nodes[0]->input(0)->producer;
}

// Which candidates the config and the level choose; `by_config` marks the config's. Inside the layers but for
// their inputs, level 1 chooses every plain candidate (layer-wise checkpointing, as ONNX Runtime's level 1),
// level 2 the compromised ones too.
static std::vector<bool> choose_by_config_and_level(const std::vector<Candidate>& candidates, const RecomputeOptions& o,
                                                    const Layers& layers, std::vector<bool>* by_config) {
  std::vector<bool> pick(candidates.size(), false);
  by_config->assign(candidates.size(), false);
  std::map<std::string, int64_t> counted;  // cluster -> occurrences the config took so far (forward order)
  for (size_t i = 0; i < candidates.size(); ++i) {
    const Candidate& c = candidates[i];
    auto e = std::find_if(o.config.begin(), o.config.end(), [&](auto& x) { return x.cluster == c.cluster; });
    bool allowed = e != o.config.end() && (e->strategy == 2 || (e->strategy == 1 && !c.compromise));
    if (allowed && (e->count == -1 || counted[c.cluster] < e->count)) {
      counted[c.cluster]++;
      pick[i] = (*by_config)[i] = true;
    }
    bool switched_off = e != o.config.end() && e->strategy == 0;      // the config overrides the level
    if (cast_at_every_level(c) && e == o.config.end() && !pick[i]) {  // unless the config says otherwise
      pick[i] = true;
      continue;
    }
    bool level_allows = o.level == 2 || (o.level == 1 && !c.compromise);
    if (level_allows && !switched_off && layers.nodes.count(c.target->producer) && !layers.has_input(c.target))
      pick[i] = true;
  }
  return pick;
}

static void rewrite(ir::Graph& g, const std::vector<Candidate>& candidates, const std::vector<bool>& pick,
                    const Layers& layers) {
  Clones done{{}, {}, layers};
  for (size_t i = 0; i < candidates.size(); ++i)
    if (pick[i]) clone_into_backward(g, candidates[i], done);
  if (done.nodes.empty()) return;
  g.sort_nodes();  // the node list stays topologically sorted for the passes
  passes::gelu_recompute_fusion()->apply(g);
}

static int64_t eval_or_throw(const Dim& d, const Bindings& dims, const std::string& what) {
  auto v = d.eval(dims);
  if (!v) throw ConfigError("memory budget: the size of " + what + " (" + d.str() + ") needs dims that were not given");
  return *v;
}

// Adds to `pick` the cheapest further plans that save what the options ask (a fraction of the stash kept, or
// bytes saved); the report says how much they save and whether that is enough. Layer inputs are not offered:
// they are the checkpoints every layer's recompute starts from.
static void choose_for_budget(const ir::Graph& g, const std::vector<Candidate>& candidates, const RecomputeOptions& o,
                              const Layers& layers, std::vector<bool>* pick, RecomputeReport* report) {
  std::vector<Item> items;
  std::vector<size_t> index;  // items -> candidates
  int64_t saved_anyway = 0;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (!(*pick)[i] && layers.has_input(candidates[i].target)) continue;
    int64_t bytes = eval_or_throw(candidates[i].bytes, o.dims, "'" + candidates[i].target->name + "'");
    if ((*pick)[i]) {
      saved_anyway += bytes;
      continue;
    }
    items.push_back({bytes, eval_or_throw(candidates[i].cost, o.dims, "a recompute cost")});
    index.push_back(i);
  }
  if (o.stash_fraction <= 0) {  // bytes to save, beyond what config and level save
    Choice c = choose_cheapest(items, o.save_bytes);
    for (size_t k : c.chosen) (*pick)[index[k]] = true;
    report->saved = c.saved, report->met = c.met;
    return;
  }
  int64_t stash = 0;
  for (const ir::Value* v : stashed_values(g)) stash += eval_or_throw(v->bytes(), o.dims, "'" + v->name + "'");
  int64_t need = std::max<int64_t>(0, stash - int64_t(o.stash_fraction * double(stash)));
  Choice c = choose_cheapest(items, need - saved_anyway);
  for (size_t k : c.chosen) (*pick)[index[k]] = true;
  report->saved = c.saved + saved_anyway, report->met = c.met;
  std::ostringstream os;
  os << "budget " << Budget{o.stash_fraction, 0, {}}.str() << ": of a " << mib(stash) << " stash, save " << mib(need)
     << "; the plans chosen save " << mib(report->saved)
     << (c.met ? "" : " (missed by " + mib(need - saved_anyway - c.saved) + ")");
  report->budget = os.str();
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
  std::vector<bool> by_config;
  std::vector<bool> pick = choose_by_config_and_level(candidates, o, layers, &by_config);
  if (o.stash_fraction > 0 || o.save_bytes > 0) choose_for_budget(g, candidates, o, layers, &pick, &report);
  for (size_t i = 0; i < candidates.size(); ++i) {
    ClusterReport& r = report.clusters[row_of[i]];
    r.applied += pick[i];
    r.requested += by_config[i] || pick[i];  // the config's, the level's and the budget's picks
  }
  for (auto& r : report.clusters) {  // the config may ask for more occurrences than exist
    auto e = std::find_if(o.config.begin(), o.config.end(), [&](auto& x) { return x.cluster == r.cluster; });
    bool asks = e != o.config.end() && (e->strategy == 2 || (e->strategy == 1 && !r.compromise));
    if (asks && e->count > r.frequency) r.requested += e->count - r.frequency;
  }
  rewrite(g, candidates, pick, layers);
  return report;
}

static std::string evaluated(const Dim& d, const Bindings& dims) {
  auto v = d.eval(dims);
  return v ? std::to_string(*v) : "?";
}

std::string RecomputeReport::str(const Bindings& dims) const {
  std::ostringstream os;
  os << "cluster | shape | frequency | status (applied/requested) | bytes saved each (symbolic = evaluated) | "
        "recompute flops each | config entry\n";
  for (auto& c : clusters)
    os << c.cluster << " | " << c.shape << " | " << c.frequency << " | " << (c.applied ? "ON" : "OFF") << " ("
       << c.applied << "/" << c.requested << ") | " << c.bytes.str() << " = " << evaluated(c.bytes, dims) << " | "
       << c.flops.str() << " = " << evaluated(c.flops, dims) << " | " << c.config()
       << (c.compromise ? " (compromise)" : "") << "\n";
  if (!level.empty()) os << level << "\n";
  if (!budget.empty()) os << budget << "\n";
  return os.str();
}

std::string RecomputeReport::json(const Bindings& dims) const {
  nlohmann::json rows = nlohmann::json::array();
  for (auto& c : clusters) {
    auto b = c.bytes.eval(dims), f = c.flops.eval(dims);
    rows.push_back({{"cluster", c.cluster},
                    {"shape", c.shape},
                    {"frequency", c.frequency},
                    {"requested", c.requested},
                    {"applied", c.applied},
                    {"bytes", c.bytes.str()},
                    {"bytes_evaluated", b ? nlohmann::json(*b) : nullptr},
                    {"flops", c.flops.str()},
                    {"flops_evaluated", f ? nlohmann::json(*f) : nullptr},
                    {"config", c.config()},
                    {"compromise", c.compromise}});
  }
  return nlohmann::json{{"clusters", rows}, {"budget", budget}, {"level", level}}.dump(2);
}

}  // namespace onnxtrain::memory
