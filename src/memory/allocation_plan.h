// The allocation plan: for an execution order, how each value gets its memory
// (external, a new buffer, the buffer of a dying input, or a view of an input)
// and after which step each buffer is released. The executor only reads it;
// sizes stay symbolic and are evaluated for the dims of each call.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/dim.h"
#include "ir/graph.h"
#include "onnxtrain/device.h"

namespace onnxtrain::memory {

enum class AllocKind {
  kExternal,  // graph input or initializer: memory the caller or the model owns
  kAllocate,  // a new buffer from the caching allocator
  kInPlace,   // written into the buffer of an input whose last reader is this node
  kView,      // the same data as an input, reshaped
};

struct ValuePlan {
  AllocKind kind = AllocKind::kAllocate;
  const ir::Value* source = nullptr;  // kInPlace/kView: the input whose buffer it uses
  const ir::Value* root = nullptr;    // the value that allocated the buffer
  int last_use = -1;                  // step of its last reader; INT32_MAX for graph outputs
  Dim bytes;                          // kAllocate: the buffer's size (unrounded)
};

struct StepPlan {
  const ir::Node* node = nullptr;
  std::vector<const ir::Value*> release;  // values whose reference is dropped after this step
  std::vector<const ir::Value*> frees;    // buffers (roots) that die after this step
  // Whether no kernel reads the node's outputs on the device: each is read only as an input its reader takes on the
  // host (a shape, axes), or by another such node, none is a graph output, and shape inference found the elements
  // of each (Value::sym_value). Where the host cannot read the device's memory, the host evaluates those elements
  // for its readers (kernels/run_node.cpp), so the node's kernel need not run (Shape nodes and their arithmetic).
  bool host_only = false;
};

class AllocationPlan {
 public:
  // Plans `order` (nodes of g, topologically sorted) with the scratch of `device`'s kernels; in-place reuse can
  // be switched off. `handed`: graph outputs the caller takes at a step (gradients an optimizer applies there),
  // released after it rather than kept to the end. `returned`: graph outputs the caller takes at a step and
  // releases itself (a training step's forward outputs, but for the stash's readers in backward): counted as
  // freed after it, not released by the executor.
  static AllocationPlan build(const ir::Graph& g, const std::vector<const ir::Node*>& order, bool allow_inplace = true,
                              Device device = kCpu, const std::map<const ir::Value*, int>& handed = {},
                              const std::map<const ir::Value*, int>& returned = {});

  const std::vector<StepPlan>& steps() const { return steps_; }
  const ValuePlan& value(const ir::Value* v) const { return values_.at(v); }
  bool has(const ir::Value* v) const { return values_.count(v) != 0; }
  // Peak bytes of the caching allocator for one run with these dims (rounded as it
  // rounds); nullopt when some size depends on data.
  std::optional<int64_t> predicted_peak(const Bindings& dims) const;
  // Bytes live after each step (same rounding).
  std::optional<std::vector<int64_t>> live_bytes(const Bindings& dims) const;
  // Values whose buffers are allocated at step s (their sizes: value(v).bytes).
  const std::vector<const ir::Value*>& allocations(size_t s) const { return allocs_[s]; }
  // The kernel scratch of step s: allocated after its outputs, freed when its kernel returns.
  const Dim& scratch(size_t s) const { return scratch_[s]; }
  // One line per step: the node, what it allocates or reuses, what it frees.
  std::string str() const;

 private:
  std::vector<StepPlan> steps_;
  std::map<const ir::Value*, ValuePlan> values_;
  std::vector<std::vector<const ir::Value*>> allocs_;  // per step: roots allocated there
  std::vector<Dim> scratch_;                           // per step: its kernel's scratch bytes
};

}  // namespace onnxtrain::memory
