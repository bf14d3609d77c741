// onnxtrain::Session: load an ONNX model and run it on named inputs; built for
// training, it runs the forward part and the backward part separately, the
// stash of each forward call held by a RunState. The public API: this header and
// those it includes are all a C++ user compiles against (the compiled graph, its
// plans and the executor stay behind Session::Impl, runtime/session_impl.h).
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "onnxtrain/bindings.h"
#include "onnxtrain/device.h"
#include "onnxtrain/error.h"
#include "onnxtrain/memory_prediction.h"
#include "onnxtrain/tensor.h"
#include "onnxtrain/training_spec.h"

namespace onnxtrain {

class CachingAllocator;

// How the graph is compiled and how it runs. The memory optimizer's settings are checked (ConfigError) when a
// training session is built.
struct SessionOptions {
  Device device = kCpu;                   // where the inputs are given and the outputs returned
  uint64_t seed = 0;                      // for random ops; each forward call draws the next
  CachingAllocator* allocator = nullptr;  // the device's allocator when null (its device then decides `device`)
  // Whether the allocator keeps its free blocks between steps; by default each run() and run_backward() ends by
  // returning them to the system, at once or, with release_cache_after seconds, once nothing has been allocated
  // for that long.
  bool keep_cache = false;
  double release_cache_after = 0;
  bool allow_inplace = true;  // let outputs reuse dying inputs' buffers
  bool optimize = true;       // run the graph passes (constant folding, CSE, dead code, fusions)
  // Training: the memory optimizer. memory_level as ONNX Runtime's (0; 1 layer-wise recompute; 2 with compromised
  // plans); memory_config its recompute plans ("ClusterId:Strategy:Count,...", or a JSON file of them);
  // memory_budget "" (none), a fraction of the stash to keep ("0.3") or a size for the step's peak ("6GiB");
  // memory_dims the batch budgets and reports are sized for.
  int memory_level = 0;
  std::string memory_config;
  std::string memory_budget;
  Bindings memory_dims;
  double optimizer_state_factor = 0;  // optimizer state bytes per parameter byte, in predictions and budgets
  // `wrt` entries whose gradients the caller's optimizer applies inside backward (run_backward's on_gradient, at
  // their handoff): freed then, and not returned.
  std::set<std::string> applied_in_backward;
};

// What one forward call leaves for its backward call: the stashed activations
// (and references to the inputs and parameters backward reads). Dropping it frees them.
class RunState {
 public:
  struct Impl;
  explicit RunState(std::unique_ptr<Impl> impl);
  ~RunState();
  // Bytes of the activations it holds (each storage counted once).
  int64_t stash_bytes() const;
  // Each stashed activation: value name -> bytes (a view and its base both listed).
  std::map<std::string, int64_t> stash_values() const;
  uint64_t seed() const;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// Time spent per op type since profiling was switched on.
struct OpProfile {
  double ms = 0;
  int64_t calls = 0;
};

class Session {
 public:
  static Session load(const std::string& path, SessionOptions options = {});
  static Session from_bytes(const std::string& bytes, SessionOptions options = {});
  // Training: the model's forward graph plus the backward graph for `spec`.
  static Session load(const std::string& path, const TrainingSpec& spec, SessionOptions options = {});
  static Session from_bytes(const std::string& bytes, const TrainingSpec& spec, SessionOptions options = {});

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
  std::optional<int64_t> predicted_peak(const Bindings& dims) const;
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
  // Saves the graph it runs (training: forward and backward, after the passes) as an ONNX model, atomically.
  void save(const std::string& path) const;
  // The ops of the graph it runs (domain.op_type; views aside) with no kernel on `device`'s type, sorted: what keeps
  // this model from running there. An UnsupportedError when this build has no kernels for that type at all.
  std::vector<std::string> ops_without_kernel(Device device) const;

  bool is_training() const;
  std::vector<std::string> input_names() const;        // forward inputs
  // A forward input's dtype, and its dims for these symbol values (an InputError naming those `dims` lacks).
  DType input_dtype(const std::string& name) const;
  std::vector<int64_t> input_dims(const std::string& name, const Bindings& dims) const;
  std::vector<std::string> output_names() const;       // forward outputs
  std::vector<std::string> grad_names() const;         // training: the `wrt` inputs, in order
  std::vector<std::string> output_grad_names() const;  // output-gradient mode: forward outputs that take a gradient
  // Those of output_grad_names() whose gradient run_backward may be given none of (read as zeros, at no cost).
  std::vector<std::string> optional_output_grad_names() const;
  // Training: whether the loss (or the outputs) depends on each `wrt` input (else its gradient is zeros).
  const std::vector<bool>& grads_reached() const;
  // Training: forward outputs holding the updated running statistics of TrainingSpec::running_statistics,
  // {output: input}; the caller writes each over its input after the step.
  const std::map<std::string, std::string>& buffer_updates() const;
  // Per-op-type time of every run since profiling was switched on (empty when it is off).
  void set_profiling(bool on);
  std::map<std::string, OpProfile> profile() const;

  // What it runs (the compiled graph, its plans), for onnxtrain's own code: runtime/session_impl.h.
  struct Impl;
  explicit Session(std::unique_ptr<Impl> impl);
  Session(Session&&) noexcept;
  Session& operator=(Session&&) noexcept;
  ~Session();
  const Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace onnxtrain
