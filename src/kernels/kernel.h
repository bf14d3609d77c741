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
[[noreturn]] void attributes_mismatch(const KernelCtx& c);

// A kernel of an op without attributes, and of an op whose attributes are A (ops::OpWith<A>).
inline KernelFn kernel(void (*fn)(KernelCtx&)) {
  return [fn](const ops::Op&, KernelCtx& c) { fn(c); };
}
template <typename A, typename F>
KernelFn kernel_with(F fn) {  // fn(const A&, KernelCtx&), a lambda
  return [fn](const ops::Op& op, KernelCtx& c) {
    auto* with = dynamic_cast<const ops::OpWith<A>*>(&op);
    if (!with) attributes_mismatch(c);
    fn(with->attrs, c);
  };
}
template <typename A>
KernelFn kernel(void (*fn)(const A&, KernelCtx&)) {
  return kernel_with<A>(fn);
}
struct KernelDef {
  std::string domain;  // "" for ONNX's default domain
  std::string name;
  KernelFn fn;
};
// Registers kernels of one device (each kernel file does it once, from a static initializer).
bool register_kernels(Device device, std::vector<KernelDef> defs);
// The kernel of n's op on `device`; throws UnsupportedError when there is none.
const KernelFn& find_kernel(Device device, const ir::Node& n);
bool has_kernel(Device device, const std::string& domain, const std::string& name);

}  // namespace onnxtrain::kernels
