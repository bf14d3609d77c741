// onnxtrain::Session: load an ONNX model and run it on named inputs; built for
// training, it runs the forward part and the backward part separately, the
// stash of each forward call held by a RunState.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "autodiff/training_graph.h"
#include "core/allocator.h"
#include "core/dim.h"
#include "core/tensor.h"
#include "ir/graph.h"
#include "memory/executable.h"
#include "memory/predict.h"
#include "onnxtrain/error.h"
#include "runtime/compile.h"
#include "runtime/executor.h"
#include "runtime/memory_recorder.h"

namespace onnxtrain {

// How the graph is compiled (runtime::CompileOptions: passes, the memory optimizer's settings, parsed and checked
// where they come in: bindings, CLI), and how it runs.
struct SessionOptions : runtime::CompileOptions {
  uint64_t seed = 0;                      // for random ops; each forward call draws the next
  CachingAllocator* allocator = nullptr;  // the device's allocator when null
  // Whether the allocator keeps its free blocks between steps; by default each run() and run_backward() ends by
  // returning them to the system, at once or, with release_cache_after seconds, once nothing has been allocated
  // for that long (CachingAllocator::trim_when_idle).
  bool keep_cache = false;
  double release_cache_after = 0;
};

// What one forward call leaves for its backward call: the stashed activations
// (and references to the inputs and parameters backward reads). Dropping it frees them.
class RunState {
 public:
  // Bytes of the activations it holds (each storage counted once).
  int64_t stash_bytes() const;
  // Each stashed activation: value name -> bytes (a view and its base both listed).
  std::map<std::string, int64_t> stash_values() const;
  uint64_t seed() const { return seed_; }

 private:
  friend class Session;
  runtime::Env env_;
  uint64_t seed_ = 0;
  Bindings dims_;  // the forward call's dims by symbol
  bool consumed_ = false;
};

using memory::MemoryPrediction;

class Session {
 public:
  // Inference: the model as it is.
  explicit Session(std::unique_ptr<ir::Graph> graph, SessionOptions options = {});
  // Training: the model's forward graph plus the backward graph for `spec`.
  Session(std::unique_ptr<ir::Graph> graph, const autodiff::TrainingSpec& spec, SessionOptions options = {});
  static Session load(const std::string& path, SessionOptions options = {});
  static Session from_bytes(const std::string& bytes, SessionOptions options = {});

  // Runs every node; every graph input must be given. Returns the graph outputs by name.
  std::map<std::string, Tensor> run(const std::map<std::string, Tensor>& feeds);
  // Training sessions: the forward part only; returns the forward outputs and the stash.
  // Random ops draw from `seed` when given (the same seed gives bit-identical dropout masks), else from
  // the session's next seed.
  std::pair<std::map<std::string, Tensor>, std::unique_ptr<RunState>> run_forward(
      const std::map<std::string, Tensor>& feeds, std::optional<uint64_t> seed = std::nullopt);
  // The backward part of one forward call: gradients of the `wrt` inputs by name. Output-gradient mode
  // takes a gradient for every differentiable forward output (output_grad_names()), by output name, but those of
  // optional_output_grad_names(), which may be left out.
  // `refeeds`: forward inputs given again, by name (same dtypes and dims), whose memory replaces what the forward
  // was fed wherever the stash still reads it (views included): for callers whose tensors move between the two
  // calls (FSDP2 frees each parameter after forward and gathers it again, elsewhere, before backward).
  // `on_gradient`: called with each gradient as soon as it is final (the step making it has run), in the order
  // of gradient_order(), before run_backward returns them all. Those of SessionOptions::applied_in_backward come
  // at their handoff (final, and their parameter read no more: the callback may update it in place); they are
  // freed when it returns and are not among those returned.
  using GradientReady = std::function<void(const std::string& name, const Tensor& gradient)>;
  std::map<std::string, Tensor> run_backward(RunState& state, const std::map<std::string, Tensor>& output_grads = {},
                                             const std::map<std::string, Tensor>& refeeds = {},
                                             const GradientReady& on_gradient = nullptr);
  // The `wrt` inputs in the order their gradients become final in backward.
  std::vector<std::string> gradient_order() const;

  // The symbol values implied by the given inputs' dims (checks names, dtypes, ranks, dims).
  Bindings bind_inputs(const std::map<std::string, std::vector<int64_t>>& dims,
                       const std::map<std::string, DType>& dtypes = {}, bool forward_only = false) const;
  // Peak bytes the allocator will reach above its level before the run.
  std::optional<int64_t> predicted_peak(const Bindings& dims) const { return exe_.plan.predicted_peak(dims); }
  // Training: the step's memory broken down, with the recompute plans or (`without_plans`) as if none were
  // applied; throws ConfigError when a size needs dims not given.
  MemoryPrediction predict_memory(const Bindings& dims, bool without_plans = false) const;
  // Training: the memory optimizer's report followed by the predicted peak before and after its plans.
  std::string memory_report_text(const Bindings& dims, bool as_json = false) const;
  // The predicted memory timeline of one run for these dims, from the allocation plan, as JSON: for each step
  // its node, op, part (forward/backward) and the bytes live at its peak by category (gradient, stash,
  // recompute, transient); `parameters`, `predicted_peak` and `boundary` alongside (see onnxtrain.timeline).
  std::string memory_timeline(const Bindings& dims) const;
  // Records every allocation and free of the following runs (a training step: run_forward and run_backward)
  // with the step, node and category of each, until stop_memory_recording, which returns the measured
  // timeline in memory_timeline's format plus the events and the measured peak; `dims` sizes the prediction.
  void start_memory_recording();
  std::string stop_memory_recording(const Bindings& dims);
  // Training: the largest value of `symbol` (other dims as given) whose whole step (parameters, optimizer
  // state, peak) fits in `limit` bytes; 0 when even 1 does not fit.
  int64_t largest_fitting(const std::string& symbol, Bindings dims, int64_t limit) const;

  // What it runs: the compiled graph, its schedule and allocation plan, the recompute report.
  const memory::Executable& executable() const { return exe_; }
  const ir::Graph& graph() const { return *exe_.graph; }
  const memory::AllocationPlan& plan() const { return exe_.plan; }
  // Training: every recompute candidate cluster, and which the memory config applied.
  const memory::RecomputeReport& memory_report() const { return exe_.report; }
  bool is_training() const { return exe_.training; }
  size_t boundary() const { return exe_.boundary; }
  std::vector<std::string> input_names() const;        // forward inputs
  std::vector<std::string> output_names() const;       // forward outputs
  std::vector<std::string> grad_names() const;         // training: the `wrt` inputs, in order
  std::vector<std::string> output_grad_names() const;  // output-gradient mode: forward outputs that take a gradient
  // Those of output_grad_names() whose gradient run_backward may be given none of (read as zeros, at no cost).
  std::vector<std::string> optional_output_grad_names() const;
  // Training: whether the loss (or the outputs) depends on each `wrt` input (else its gradient is zeros).
  const std::vector<bool>& grads_reached() const { return exe_.reached; }
  // Training: forward outputs holding the updated running statistics of TrainingSpec::running_statistics,
  // {output: input}; the caller writes each over its input after the step.
  const std::map<std::string, std::string>& buffer_updates() const { return exe_.buffer_updates; }
  CachingAllocator& allocator() const { return *alloc_; }
  // Per-op-type time of every run since profiling was switched on.
  void set_profiling(bool on);
  const runtime::Profile* profile() const { return profile_.get(); }

 private:
  Session(memory::Executable exe, SessionOptions options);
  // Puts the feeds and the initializers into env; the call's dims by symbol.
  Bindings feed(runtime::Env& env, const std::map<std::string, Tensor>& feeds, bool forward_only) const;
  void end_of_step();  // trims the allocator unless told to keep its cache
  bool output_grad_may_be_unset(const ir::Value* gin) const;
  uint64_t next_seed() { return options_.seed + 0x5851F42D4C957F2Dull * run_count_++; }

  memory::Executable exe_;
  // Per step, the `wrt` gradients a backward step makes final; last, one more entry: those no step makes.
  std::vector<std::vector<size_t>> gradients_by_step_;
  SessionOptions options_;
  CachingAllocator* alloc_;
  std::map<const ir::Value*, Tensor> device_initializers_;  // on another device than the host: their copies there
  uint64_t run_count_ = 0;
  std::unique_ptr<runtime::Profile> profile_;
  std::unique_ptr<runtime::MemoryRecorder> recorder_;
};

}  // namespace onnxtrain
