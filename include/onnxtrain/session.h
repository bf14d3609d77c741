// onnxtrain::Session: load an ONNX model and run it on named inputs.
#pragma once
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/dim.h"
#include "core/tensor.h"
#include "ir/graph.h"
#include "memory/allocation_plan.h"
#include "onnxtrain/error.h"
#include "runtime/executor.h"

namespace onnxtrain {

struct SessionOptions {
  bool allow_inplace = true;     // let outputs reuse dying inputs' buffers
  uint64_t seed = 0;             // for random ops
  CachingAllocator* allocator = nullptr;  // the global allocator when null
};

class Session {
 public:
  explicit Session(std::unique_ptr<ir::Graph> graph, SessionOptions options = {});
  static Session load(const std::string& path, SessionOptions options = {});
  static Session from_bytes(const std::string& bytes, SessionOptions options = {});

  // Runs the whole graph; every graph input must be given. Returns the graph outputs by name.
  std::map<std::string, Tensor> run(const std::map<std::string, Tensor>& feeds);
  // The symbol values implied by the given inputs' dims (checks names, dtypes, ranks, dims).
  Bindings bind_inputs(const std::map<std::string, std::vector<int64_t>>& dims,
                       const std::map<std::string, DType>& dtypes = {}) const;
  // Peak bytes the allocator will reach above its level before the run.
  std::optional<int64_t> predicted_peak(const Bindings& dims) const { return plan_.predicted_peak(dims); }

  const ir::Graph& graph() const { return *graph_; }
  const memory::AllocationPlan& plan() const { return plan_; }
  std::vector<std::string> input_names() const;
  std::vector<std::string> output_names() const;
  CachingAllocator& allocator() const { return *alloc_; }
  // Per-op-type time of every run since profiling was switched on.
  void set_profiling(bool on);
  const runtime::Profile* profile() const { return profile_.get(); }

 private:
  std::unique_ptr<ir::Graph> graph_;
  SessionOptions options_;
  CachingAllocator* alloc_;
  memory::AllocationPlan plan_;
  uint64_t run_count_ = 0;
  std::unique_ptr<runtime::Profile> profile_;
};

}  // namespace onnxtrain
