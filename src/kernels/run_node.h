// The one way a node runs, for the executor, constant folding and shape inference alike: infer the concrete
// output shapes from the inputs, bind each output (a view of input 0 for view ops, the buffer the caller offers
// for in-place reuse, else a new buffer from the device's allocator), then call the device's kernel. What the
// first two steps work out can be kept between runs of the node (NodeCache).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/dim.h"
#include "ir/graph.h"
#include "onnxtrain/device.h"
#include "onnxtrain/tensor.h"
#include "ops/op.h"

namespace onnxtrain {
class CachingAllocator;
}

namespace onnxtrain::kernels {

struct Kernel;

// What run_node works out for a node from its inputs' dtypes and dims, and the values of the inputs it reads on
// the host: its kernel, its shape function's result, its outputs' dims and bytes, its kernel's scratch. A caller
// that runs the node again (the executor: one per plan step) keeps it, and run_node reuses it while those stay the
// same: a step of a run whose shapes repeat then looks nothing up and infers nothing.
struct NodeCache {
  const Kernel* kernel = nullptr;  // bound at the first run
  std::vector<int64_t> key;        // the inputs it was worked out for (run_node.cpp: walk_key)
  std::unique_ptr<ops::InferCtx> shapes;
  std::vector<std::vector<int64_t>> dims;  // per output
  std::vector<size_t> bytes;
  size_t scratch = 0;
};

struct RunArgs {
  Device device = kCpu;
  CachingAllocator* alloc = nullptr;  // the device's allocator; null: the global one
  uint64_t seed = 0;                  // random ops: the run's seed (the node's key is mixed in by the caller)
  // The call's dims, by symbol: where a device's memory is not the host's, an input read on the host whose value
  // shape inference knows (Value::sym_value) is evaluated with them instead of copied from the device.
  const Bindings* dims = nullptr;
  // Per output (may be shorter): a tensor whose buffer output i takes when its byte size matches (in place).
  std::vector<const Tensor*> reuse;
  // Called with each output that got a buffer of its own.
  std::function<void(size_t output, const Tensor& t)> on_new_buffer;
  // Kept between runs of this node (see NodeCache); none when null.
  NodeCache* cache = nullptr;
  // No kernel reads the node's outputs on the device (memory::StepPlan::host_only): where the host cannot read the
  // device's memory and shape inference's elements of every output evaluate with `dims`, the outputs are bound but
  // the kernel does not run (their readers take those elements on the host).
  bool host_only = false;
};

// Outputs of n for these inputs (nullptr for an omitted input); an output not in the graph stays undefined.
std::vector<Tensor> run_node(const ir::Node& n, const std::vector<const Tensor*>& inputs, const RunArgs& args = {});

}  // namespace onnxtrain::kernels
