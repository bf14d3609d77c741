#include "memory/recompute.h"

#include <algorithm>
#include <climits>
#include <numeric>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "onnxtrain/error.h"
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

static Dim bytes_of(const ir::Value* v) {
  return v->has_shape ? shape_numel(v->shape) * Dim(int64_t(dtype_size(v->dtype))) : Dim::symbol("bytes(" + v->name + ")");
}

std::vector<Candidate> find_candidates(const ir::Graph& g, size_t node_cap) {
  std::vector<Candidate> out;
  for (const ir::Value* target : stashed_values(g)) {
    std::set<const ir::Node*> chosen;
    std::vector<const ir::Node*> todo = {target->producer};
    bool ok = true;
    while (ok && !todo.empty()) {
      const ir::Node* n = todo.back();
      todo.pop_back();
      if (chosen.count(n)) continue;
      if (!n->op || !n->op->recomputable() || chosen.size() >= node_cap) {
        ok = false;
        break;
      }
      chosen.insert(n);
      for (const ir::Value* u : n->inputs) {
        // Free in backward: graph inputs, parameters, constants, and values stashed anyway.
        if (!u || !u->producer || u->producer->backward || read_in_backward(u)) continue;
        todo.push_back(u->producer);
      }
    }
    if (!ok) continue;
    Candidate c;
    c.target = target;
    for (auto& n : g.nodes())
      if (chosen.count(n.get())) c.nodes.push_back(n.get());  // forward order
    c.flops = Dim(0);
    for (const ir::Node* n : c.nodes) {
      c.cluster += n->op_type + "+";
      c.flops = c.flops + n->op->flops(*n);
    }
    c.bytes = bytes_of(target);
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
  if (strategy != "0" && strategy != "1")
    throw bad("strategy '" + strategy + "' is not 0 (off) or 1 (recompute)" +
              (strategy == "2" ? "; 2 (recompute with compromise) is not supported yet" : ""));
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
  // A file: a path that exists or ends in .json; anything else is an inline list.
  bool is_file = std::ifstream(text).good() || (text.size() > 5 && text.compare(text.size() - 5, 5, ".json") == 0);
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
    if (!f) throw ConfigError("memory config file '" + text + "' cannot be read");
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
// cloned values instead of forward ones (so every recomputed target really leaves the stash),
// and a node already cloned (another output of LayerNormalization, say) is not cloned again.
struct Clones {
  std::map<const ir::Value*, ir::Value*> values;
  std::set<const ir::Node*> nodes;
};

static void clone_into_backward(ir::Graph& g, const Candidate& c, Clones& done) {
  std::map<const ir::Value*, ir::Value*>& clone_of = done.values;
  std::vector<ir::Node*> clones;
  for (const ir::Node* n : c.nodes) {
    if (done.nodes.count(n)) continue;
    done.nodes.insert(n);
    std::vector<ir::Value*> ins, outs;
    for (ir::Value* u : n->inputs) ins.push_back(u && clone_of.count(u) ? clone_of[u] : u);
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
    k->random_key = n->random_key.empty() ? n->name : n->random_key;  // the same dropout mask
    clones.push_back(k);
  }
  // Backward readers of the target read the clone; the first of them anchors the clones.
  ir::Value* target = const_cast<ir::Value*>(c.target);
  ir::Value* clone = clone_of.at(target);
  const ir::Node* first = nullptr;
  std::set<const ir::Node*> rewired;
  for (auto& n : g.nodes()) {
    if (!n->backward || std::find(clones.begin(), clones.end(), n.get()) != clones.end()) continue;
    for (ir::Value*& in : n->inputs)
      if (in == target) in = clone, rewired.insert(n.get());
    if (rewired.count(n.get())) {
      clone->consumers.push_back(n.get());
      if (!first) first = n.get();
    }
  }
  target->consumers.erase(std::remove_if(target->consumers.begin(), target->consumers.end(),
                                         [&](const ir::Node* n) { return rewired.count(n) != 0; }),
                          target->consumers.end());
  if (!clones.empty()) g.move_before(clones, first);  // (reused clones get ordered by the final sort)
}

BudgetChoice choose_for_budget(const std::vector<Candidate>& candidates, const ir::Graph& g, const Budget& budget) {
  BudgetChoice r;
  for (const ir::Value* v : stashed_values(g)) {
    auto b = bytes_of(v).eval(budget.dims);
    if (!b) throw ConfigError("memory budget: the size of '" + v->name + "' (" + bytes_of(v).str() + ") needs dims that were not given");
    r.stash += *b;
  }
  r.need = std::max<int64_t>(0, r.stash - int64_t(budget.stash_fraction * double(r.stash)));
  std::vector<int64_t> bytes, flops;
  int64_t unit = 0;
  for (auto& c : candidates) {
    auto b = c.bytes.eval(budget.dims), f = c.flops.eval(budget.dims);
    bytes.push_back(b ? *b : 0);
    flops.push_back(f ? *f : 0);
    unit = std::gcd(unit, bytes.back());
  }
  unit = std::max<int64_t>(unit, 1);
  const int64_t cap = (r.need + unit - 1) / unit;  // units to save, at least
  // dp[u]: least flops saving at least u units (capped at cap); take[i][u]: whether item i is used there.
  const int64_t kInf = INT64_MAX / 4;
  std::vector<int64_t> dp(size_t(cap) + 1, kInf);
  dp[0] = 0;
  std::vector<std::vector<bool>> take(candidates.size(), std::vector<bool>(size_t(cap) + 1, false));
  for (size_t i = 0; i < candidates.size(); ++i) {
    int64_t w = bytes[i] / unit;
    if (w == 0) continue;
    for (int64_t u = cap; u >= 0; --u) {
      int64_t from = std::max<int64_t>(0, u - w);
      // reaching u from `from` (any state >= u - w reaches u when capped)
      if (dp[size_t(from)] < kInf && dp[size_t(from)] + flops[i] < dp[size_t(u)]) {
        dp[size_t(u)] = dp[size_t(from)] + flops[i];
        take[i][size_t(u)] = true;
      }
    }
  }
  if (dp[size_t(cap)] >= kInf) {  // cannot meet it: recompute everything and say by how much it misses
    for (size_t i = 0; i < candidates.size(); ++i) r.chosen.push_back(i), r.saved += bytes[i];
    return r;
  }
  int64_t u = cap;
  for (size_t i = candidates.size(); i-- > 0 && u > 0;)
    if (take[i][size_t(u)]) {
      r.chosen.push_back(i);
      r.saved += bytes[i];
      u = std::max<int64_t>(0, u - bytes[i] / unit);
    }
  std::reverse(r.chosen.begin(), r.chosen.end());
  r.met = true;
  return r;
}

std::vector<const ir::Node*> detect_layers(const ir::Graph& g) {
  auto is_add = [](const ir::Node* n) { return n && n->op_type == "Add"; };
  std::vector<const ir::Node*> starts;
  for (auto& n : g.nodes()) {
    if (n->backward || n->op_type != "LayerNormalization") continue;
    const ir::Value* in = n->inputs[0];
    bool residual = is_add(in->producer);
    for (const ir::Node* c : in->consumers) residual = residual || (is_add(c) && !c->backward);
    if (!residual) continue;
    // Does the output reach a Softmax before another LayerNormalization?
    std::vector<const ir::Value*> todo = {n->outputs[0]};
    std::set<const ir::Node*> seen;
    bool attention = false;
    while (!todo.empty() && !attention) {
      const ir::Value* v = todo.back();
      todo.pop_back();
      for (const ir::Node* c : v->consumers) {
        if (c->backward || !seen.insert(c).second || c->op_type == "LayerNormalization") continue;
        if (c->op_type == "Softmax") attention = true;
        for (const ir::Value* o : c->outputs)
          if (o) todo.push_back(o);
      }
    }
    if (attention) starts.push_back(n.get());
  }
  return starts;
}

RecomputeReport apply_recompute(ir::Graph& g, const std::vector<ConfigEntry>& config, const Budget* budget, int level) {
  auto candidates = find_candidates(g);
  RecomputeReport report;
  std::map<std::string, size_t> row;  // cluster + shape -> report row
  for (auto& c : candidates) {
    std::string shape = c.target->has_shape ? shape_str(c.target->shape) : "?";
    auto [it, fresh] = row.emplace(c.cluster + shape, report.clusters.size());
    if (fresh) report.clusters.push_back(ClusterReport{c.cluster, shape, 0, 0, 0, c.bytes, c.flops});
    report.clusters[it->second].frequency++;
  }
  std::set<size_t> by_budget;
  if (budget) {
    BudgetChoice choice = choose_for_budget(candidates, g, *budget);
    by_budget.insert(choice.chosen.begin(), choice.chosen.end());
    std::ostringstream os;
    os << "budget: keep " << budget->stash_fraction * 100 << "% of a " << choice.stash << "-byte stash: save " << choice.need
       << " bytes; the plans chosen save " << choice.saved << " bytes"
       << (choice.met ? "" : " (missed by " + std::to_string(choice.need - choice.saved) + " bytes)");
    report.budget = os.str();
  }
  std::set<const ir::Node*> in_layers;  // level 1: forward nodes from the first layer start to the last layer's end
  std::set<const ir::Value*> checkpoints;  // level 1: each layer's input stays stashed (recomputing it would chain layers)
  if (level == 1) {
    auto starts = detect_layers(g);
    std::ostringstream os;
    os << "level 1: " << starts.size() << " transformer layers";
    if (starts.empty()) os << " found: nothing recomputed (no LayerNormalization on a residual stream reaches a Softmax)";
    report.level = os.str();
    for (const ir::Node* s : starts) checkpoints.insert(s->inputs[0]);
    if (!starts.empty()) {
      // A layer spans from its start to the next start; the last one to the last LayerNormalization after it.
      const ir::Node* end = nullptr;
      bool inside = false;
      for (auto& n : g.nodes())
        if (!n->backward && n->op_type == "LayerNormalization") end = n.get();
      for (auto& n : g.nodes()) {
        if (n->backward) continue;
        if (n.get() == starts.front()) inside = true;
        if (n.get() == end && n.get() != starts.back()) inside = false;
        if (inside) in_layers.insert(n.get());
      }
    }
  } else if (level != 0) {
    throw ConfigError("memory optimizer level " + std::to_string(level) + " is not supported" +
                      (level == 2 ? " yet (level 2 adds compromised plans)" : " (levels are 0 and 1)"));
  }
  std::map<std::string, int64_t> applied;  // cluster -> occurrences applied so far (forward order)
  Clones done;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const Candidate& c = candidates[i];
    auto e = std::find_if(config.begin(), config.end(), [&](auto& x) { return x.cluster == c.cluster; });
    bool configured = e != config.end() && e->strategy == 1 && (e->count == -1 || applied[c.cluster] < e->count);
    bool switched_off = e != config.end() && e->strategy == 0;  // the config overrides the level
    bool layer = !switched_off && in_layers.count(c.target->producer) && !checkpoints.count(c.target);
    if (!configured && !by_budget.count(i) && !layer) continue;
    clone_into_backward(g, c, done);
    applied[c.cluster]++;
    std::string shape = c.target->has_shape ? shape_str(c.target->shape) : "?";
    ClusterReport& r = report.clusters[row.at(c.cluster + shape)];
    r.applied++;
    if (!configured) r.requested++;  // chosen by the budget
  }
  if (!done.nodes.empty()) g.sort_nodes();  // clones reading earlier clones: producers first
  for (auto& r : report.clusters) {  // requested by the config (the budget's picks are counted above)
    auto e = std::find_if(config.begin(), config.end(), [&](auto& x) { return x.cluster == r.cluster; });
    if (e != config.end() && e->strategy == 1) r.requested += e->count == -1 ? r.frequency : e->count;
  }
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
       << c.flops.str() << " = " << evaluated(c.flops, dims) << " | " << c.cluster << ":1:-1\n";
  if (!level.empty()) os << level << "\n";
  if (!budget.empty()) os << budget << "\n";
  return os.str();
}

std::string RecomputeReport::json(const Bindings& dims) const {
  nlohmann::json rows = nlohmann::json::array();
  for (auto& c : clusters) {
    auto b = c.bytes.eval(dims), f = c.flops.eval(dims);
    rows.push_back({{"cluster", c.cluster}, {"shape", c.shape}, {"frequency", c.frequency}, {"requested", c.requested},
                    {"applied", c.applied}, {"bytes", c.bytes.str()}, {"bytes_evaluated", b ? nlohmann::json(*b) : nullptr},
                    {"flops", c.flops.str()}, {"flops_evaluated", f ? nlohmann::json(*f) : nullptr},
                    {"config", c.cluster + ":1:-1"}});
  }
  return nlohmann::json{{"clusters", rows}, {"budget", budget}, {"level", level}}.dump(2);
}

}  // namespace onnxtrain::memory
