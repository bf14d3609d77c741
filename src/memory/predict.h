// Predictions from an Executable, before anything runs: a training step's memory by part (parameters, optimizer
// state, gradients, stash) and its peak by category along the allocation plan, the largest batch that fits, and
// the memory report (the recompute table with the peak before and after its plans).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/dim.h"
#include "memory/executable.h"
#include "onnxtrain/memory_prediction.h"

namespace onnxtrain::memory {

// Throws ConfigError when a size needs dims not given.
MemoryPrediction predict(const Executable& e, const Bindings& dims);
// Each plan step's bytes live by category at its highest point (the allocator's, rounded as it rounds).
std::vector<std::map<std::string, int64_t>> live_by_category(const Executable& e, const Bindings& dims);
// Each buffer (root value) of the plan: the category of the values sharing it, the first of stash, gradient,
// recompute, transient.
std::map<const ir::Value*, std::string> buffer_categories(const Executable& e);
// The largest value of `symbol` (other dims as given) whose whole step fits in `limit` bytes; 0 when even 1 does
// not fit.
int64_t largest_fitting(const Executable& e, const std::string& symbol, Bindings dims, int64_t limit);
// The recompute report followed by the predicted peak without and with its plans (symbolic when dims are
// missing), as text or JSON.
std::string report_text(const Executable& e, const Bindings& dims, bool as_json);

}  // namespace onnxtrain::memory
