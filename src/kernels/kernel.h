// The kernel layer's interface. An op (src/ops/) declares what a node computes; a kernel, registered per
// (op, device), computes it: it reads the op's typed attributes and writes outputs the caller bound
// (kernels/run_node.h). Kernels of one device live in src/kernels/<device>/.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"
#include "ir/graph.h"
#include "ops/op.h"

namespace onnxtrain {
class CachingAllocator;
}

namespace onnxtrain::kernels {

// What one kernel call sees.
struct KernelCtx {
  const ir::Node& node;
  std::vector<const Tensor*> inputs;  // nullptr for an omitted input
  std::vector<Tensor*> outputs;       // bound by run_node; nullptr when not requested
  uint64_t seed = 0;                  // for random ops: the run's seed and the node's key
  CachingAllocator* alloc = nullptr;  // the device's allocator (outputs and scratch)
  ops::InferCtx* shapes = nullptr;    // the run-time shape context of this call (concrete values)
  const Tensor& in(size_t i) const { return *inputs.at(i); }
  bool has(size_t i) const { return i < inputs.size() && inputs[i]; }
  Tensor& out(size_t i) const { return *outputs.at(i); }
  bool wants(size_t i) const { return i < outputs.size() && outputs[i]; }
  [[noreturn]] void fail(const std::string& msg) const;
};

using KernelFn = std::function<void(const ops::Op&, KernelCtx&)>;

// Registers fn as op `domain`.`name`'s kernel on `device` (the default domain is ""); OpT is the op's class.
template <typename OpT>
bool register_kernel(Device device, const std::string& domain, const std::string& name,
                     void (*fn)(const OpT&, KernelCtx&)) {
  return register_kernel_fn(device, domain, name, [fn](const ops::Op& op, KernelCtx& c) {
    fn(static_cast<const OpT&>(op), c);
  });
}
bool register_kernel_fn(Device device, const std::string& domain, const std::string& name, KernelFn fn);
// The kernel of n's op on `device`; throws UnsupportedError when there is none.
const KernelFn& find_kernel(Device device, const ir::Node& n);
bool has_kernel(Device device, const std::string& domain, const std::string& name);

}  // namespace onnxtrain::kernels
