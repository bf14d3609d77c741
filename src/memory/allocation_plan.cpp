#include "memory/allocation_plan.h"

#include <algorithm>
#include <climits>
#include <sstream>

#include "core/allocator.h"
#include "kernels/kernel.h"
#include "ops/op.h"

namespace onnxtrain::memory {

// Bytes the allocator hands out for a request (a zero-byte scratch is no request).
static int64_t rounded(int64_t bytes) { return int64_t(CachingAllocator::round_size(size_t(bytes == 0 ? 1 : bytes))); }

// StepPlan::host_only for each step, from the last to the first (a reader's known before its producer's).
static void mark_host_only(const ir::Graph& g, std::vector<StepPlan>& steps) {
  std::map<const ir::Node*, bool> host_only;
  auto read_on_host = [&](const ir::Node* reader, const ir::Value* v) {
    if (host_only.count(reader) && host_only[reader]) return true;
    const uint64_t host = reader->op ? reader->op->host_inputs() : 0;
    for (size_t i = 0; i < reader->inputs.size(); ++i)
      if (reader->inputs[i] == v && (i >= 64 || !(host >> i & 1))) return false;
    return true;
  };
  for (size_t s = steps.size(); s-- > 0;) {
    const ir::Node* n = steps[s].node;
    bool only = n->op && !n->op->is_random() && !n->outputs.empty();
    for (const ir::Value* v : n->outputs) {
      if (!only || !v) continue;
      only = v->sym_value && !v->sym_value->empty() &&
             std::find(g.outputs.begin(), g.outputs.end(), v) == g.outputs.end();
      for (const ir::Node* reader : v->consumers) only = only && read_on_host(reader, v);
    }
    steps[s].host_only = host_only[n] = only;
  }
}

AllocationPlan AllocationPlan::build(const ir::Graph& g, const std::vector<const ir::Node*>& order, bool allow_inplace,
                                     Device device, const std::map<const ir::Value*, int>& handed,
                                     const std::map<const ir::Value*, int>& returned) {
  AllocationPlan p;
  p.steps_.resize(order.size());
  p.allocs_.resize(order.size());
  p.scratch_.resize(order.size(), Dim(0));
  std::map<const ir::Value*, int> last_use;
  for (size_t s = 0; s < order.size(); ++s)
    for (const ir::Value* v : order[s]->inputs)
      if (v) last_use[v] = int(s);
  for (const ir::Value* v : g.outputs) {
    auto h = handed.find(v), r = returned.find(v);
    const int after = h != handed.end() ? h->second : r != returned.end() ? r->second : INT_MAX;
    last_use[v] = after == INT_MAX ? INT_MAX : std::max(last_use.count(v) ? last_use[v] : -1, after);
  }
  // (a returned value whose last use is its return is the caller's to release, not the executor's)
  auto callers = [&](const ir::Value* v) { return returned.count(v) && last_use[v] == returned.at(v); };

  for (const ir::Value* v : g.inputs) p.values_[v] = ValuePlan{AllocKind::kExternal, nullptr, v, INT_MAX, Dim(0)};
  for (const ir::Value* v : g.initializers) p.values_[v] = ValuePlan{AllocKind::kExternal, nullptr, v, INT_MAX, Dim(0)};

  std::map<const ir::Value*, int> root_death;  // root -> step after which its buffer is free
  for (size_t s = 0; s < order.size(); ++s) {
    const ir::Node* n = order[s];
    p.steps_[s].node = n;
    if (n->op && !n->op->is_view()) p.scratch_[s] = kernels::scratch_bytes(device, *n);
    for (size_t i = 0; i < n->outputs.size(); ++i) {
      const ir::Value* out = n->outputs[i];
      if (!out) continue;
      ValuePlan vp;
      auto lu = last_use.find(out);
      vp.last_use = lu == last_use.end() ? int(s) : lu->second;
      const ir::Value* src = nullptr;
      if (i == 0 && n->op && n->op->is_view() && n->inputs[0]) {
        vp.kind = AllocKind::kView;
        src = n->inputs[0];
      } else if (allow_inplace && n->op && n->op->inplace_input_of(i) >= 0) {
        const ir::Value* cand = n->input(size_t(n->op->inplace_input_of(i)));
        if (cand && p.values_.count(cand)) {
          const ValuePlan& cp = p.values_.at(cand);
          const ir::Value* root = cp.root;
          bool owned = p.values_.at(root).kind == AllocKind::kAllocate;
          bool dies_here = root_death.count(root) && root_death[root] == int(s);
          bool same_size = cand->bytes() == out->bytes() && root->bytes() == out->bytes();
          if (owned && dies_here && same_size) {
            vp.kind = AllocKind::kInPlace;
            src = cand;
          }
        }
      }
      if (src) {
        vp.source = src;
        vp.root = p.values_.at(src).root;
        root_death[vp.root] = std::max(root_death[vp.root], vp.last_use);
      } else {
        vp.kind = AllocKind::kAllocate;
        vp.root = out;
        vp.bytes = out->bytes();
        root_death[out] = vp.last_use;
        p.allocs_[s].push_back(out);
      }
      p.values_[out] = vp;
    }
    // Values read for the last time here, and outputs nobody reads, are released.
    for (const ir::Value* v : n->inputs)
      if (v && last_use[v] == int(s) && p.values_.at(v).kind != AllocKind::kExternal && !callers(v)) {
        auto& rel = p.steps_[s].release;
        if (std::find(rel.begin(), rel.end(), v) == rel.end()) rel.push_back(v);
      }
    for (const ir::Value* v : n->outputs)
      if (v && p.values_.at(v).last_use == int(s) && !callers(v)) p.steps_[s].release.push_back(v);
  }
  for (auto& [v, at] : handed) {  // (released after their handoff, where no step may read them)
    auto& rel = p.steps_[size_t(last_use[v])].release;
    if (p.values_.count(v) && std::find(rel.begin(), rel.end(), v) == rel.end()) rel.push_back(v);
  }
  for (auto& [root, death] : root_death)
    if (death != INT_MAX && p.values_.at(root).kind == AllocKind::kAllocate)
      p.steps_[size_t(death)].frees.push_back(root);
  mark_host_only(g, p.steps_);
  return p;
}

std::optional<std::vector<int64_t>> AllocationPlan::live_bytes(const Bindings& dims) const {
  std::vector<int64_t> r;
  int64_t live = 0;
  for (size_t s = 0; s < steps_.size(); ++s) {
    for (const ir::Value* v : allocs_[s]) {
      auto b = values_.at(v).bytes.eval(dims);
      if (!b) return std::nullopt;
      live += rounded(*b);
    }
    auto scratch = scratch_[s].eval(dims);
    if (!scratch) return std::nullopt;
    // The peak within a step: outputs and scratch allocated, inputs not yet freed.
    r.push_back(live + (*scratch ? rounded(*scratch) : 0));
    for (const ir::Value* v : steps_[s].frees) live -= rounded(*values_.at(v).bytes.eval(dims));
  }
  return r;
}

std::optional<int64_t> AllocationPlan::predicted_peak(const Bindings& dims) const {
  auto live = live_bytes(dims);
  if (!live) return std::nullopt;
  int64_t peak = 0;
  for (auto b : *live) peak = std::max(peak, b);
  return peak;
}

std::string AllocationPlan::str() const {
  std::ostringstream os;
  for (size_t s = 0; s < steps_.size(); ++s) {
    const ir::Node* n = steps_[s].node;
    os << s << ": " << n->op_type << " '" << n->name << "'";
    for (const ir::Value* v : n->outputs) {
      if (!v) continue;
      const ValuePlan& vp = values_.at(v);
      switch (vp.kind) {
        case AllocKind::kAllocate:
          os << " | alloc " << v->name << " (" << vp.bytes.str() << " bytes)";
          break;
        case AllocKind::kInPlace:
          os << " | " << v->name << " in place of " << vp.source->name;
          break;
        case AllocKind::kView:
          os << " | " << v->name << " views " << vp.source->name;
          break;
        case AllocKind::kExternal:
          break;
      }
    }
    if (!(scratch_[s] == Dim(0))) os << " | scratch " << scratch_[s].str() << " bytes";
    if (!steps_[s].frees.empty()) {
      os << " | free";
      for (const ir::Value* v : steps_[s].frees) os << " " << v->name;
    }
    os << "\n";
  }
  return os.str();
}

}  // namespace onnxtrain::memory
