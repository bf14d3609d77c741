// The kernel layer's interface. An op (src/ops/) declares what a node computes; a kernel, registered per
// (op, device), computes it: it reads the op's typed attributes and writes outputs the caller bound
// (kernels/run_node.h). Kernels of one device live in src/kernels/<device>/.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
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

// What one kernel call sees.
struct KernelCtx {
  const ir::Node& node;
  std::vector<const Tensor*> inputs;  // nullptr for an omitted input
  std::vector<Tensor*> outputs;       // bound by run_node; nullptr when not requested
  uint64_t seed = 0;                  // for random ops: the run's seed and the node's key
  CachingAllocator* alloc = nullptr;  // the device's allocator (outputs and scratch)
  ops::InferCtx* shapes = nullptr;    // the run-time shape context of this call (concrete values)
  char* scratch = nullptr;            // the bytes the kernel's ScratchFn asked for, from `alloc`, for this call
  size_t scratch_bytes = 0;
  // Scratch as an array of n T at byte `offset` (checked against what was declared).
  template <typename T>
  T* scratch_as(size_t offset, size_t n) const {
    if (offset + n * sizeof(T) > scratch_bytes) scratch_overrun(offset + n * sizeof(T));
    return reinterpret_cast<T*>(scratch + offset);
  }
  [[noreturn]] void scratch_overrun(size_t need) const;
  // Input i, which must be given (else a ShapeError naming the node).
  const Tensor& in(size_t i) const {
    if (!has(i)) absent("input", i);
    return *inputs[i];
  }
  bool has(size_t i) const { return i < inputs.size() && inputs[i]; }
  // Output i, which must be requested.
  Tensor& out(size_t i) const {
    if (!wants(i)) absent("output", i);
    return *outputs[i];
  }
  bool wants(size_t i) const { return i < outputs.size() && outputs[i]; }
  [[noreturn]] void fail(const std::string& msg) const;
  [[noreturn]] void absent(const char* what, size_t i) const;
  // Inputs 1 to count - 1 shaped and typed as input 0 (else a ShapeError naming the node).
  void inputs_like_first(size_t count) const;
};

// Scratch holding several arrays lays them out one after another, each at a 64-byte boundary: its ScratchFn sums
// scratch_span() of each array's bytes, and the kernel takes them in the same order from a ScratchCarver.
constexpr size_t kScratchAlignment = 64;
inline Dim scratch_span(const Dim& bytes) {
  return Dim::ceil_div(bytes, Dim(kScratchAlignment)) * Dim(kScratchAlignment);
}
struct ScratchCarver {
  const KernelCtx& c;
  size_t at = 0;  // where the next array starts
  template <typename T>
  T* take(int64_t n) {
    T* p = c.scratch_as<T>(at, size_t(n));
    at = (at + size_t(n) * sizeof(T) + kScratchAlignment - 1) / kScratchAlignment * kScratchAlignment;
    return p;
  }
};

using KernelFn = std::function<void(const ops::Op&, KernelCtx&)>;
[[noreturn]] void attributes_mismatch();

// A kernel of an op without attributes, and of an op whose attributes are A (ops::OpWith<A>).
inline KernelFn kernel(void (*fn)(KernelCtx&)) {
  return [fn](const ops::Op&, KernelCtx& c) { fn(c); };
}
// The attributes of an op of class ops::OpWith<A>.
template <typename A>
const A& attrs_of(const ops::Op& op) {
  auto* with = dynamic_cast<const ops::OpWith<A>*>(&op);
  if (!with) attributes_mismatch();
  return with->attrs;
}
template <typename A, typename F>
KernelFn kernel_with(F fn) {  // fn(const A&, KernelCtx&), a lambda
  return [fn](const ops::Op& op, KernelCtx& c) { fn(attrs_of<A>(op), c); };
}
template <typename A>
KernelFn kernel(void (*fn)(const A&, KernelCtx&)) {
  return kernel_with<A>(fn);
}
// The bytes of scratch a kernel needs beside its outputs, from the node's shapes and small values: symbolic when
// the allocation plan is made, concrete when the node runs (one function: the plan counts what the run takes).
using ScratchFn = std::function<Dim(const ops::Op&, ops::InferCtx& shapes)>;

struct KernelDef {
  std::string domain;  // "" for ONNX's default domain
  std::string name;
  KernelFn fn;
  ScratchFn scratch = nullptr;  // none: no scratch
};

// What runs a node on a device.
struct Kernel {
  KernelFn fn;
  ScratchFn scratch;
};
// Registers kernels of one device type, for each device of it (each kernel file does it once, from a static
// initializer).
bool register_kernels(Device device, std::vector<KernelDef> defs);
// The kernel of n's op on `device`; throws UnsupportedError when there is none.
const Kernel& find_kernel(Device device, const ir::Node& n);
// The scratch bytes of n's kernel on `device` for n's symbolic shapes (Dim(0) without scratch; a symbol no binding
// gives when they depend on data not known before a run).
Dim scratch_bytes(Device device, const ir::Node& n);
// The device types with kernels registered, in DLPack's order (the host's first).
std::vector<DeviceType> kernel_device_types();
// The kernel of op `domain`.`name` on `device`, or nullptr.
const Kernel* lookup_kernel(Device device, const std::string& domain, const std::string& name);

}  // namespace onnxtrain::kernels
