#include "kernels/kernel.h"

#include <algorithm>
#include <unordered_map>

#include "onnxtrain/error.h"

namespace onnxtrain::kernels {

// device type -> domain -> op -> kernel, looked up with the node's own strings (no key built per run of a node);
// "ai.onnx" is the default domain "". One device type's kernels serve each of its devices.
using OpKernels = std::unordered_map<std::string, std::unordered_map<std::string, Kernel>>;
static std::unordered_map<DeviceType, OpKernels>& table() {
  static std::unordered_map<DeviceType, OpKernels> t;
  return t;
}

static const std::string& domain_of(const std::string& domain) {
  static const std::string kDefault;
  return domain == "ai.onnx" ? kDefault : domain;
}

bool register_kernels(Device device, std::vector<KernelDef> defs) {
  for (auto& d : defs)
    table()[device.type][domain_of(d.domain)][d.name] = Kernel{std::move(d.fn), std::move(d.scratch)};
  return true;
}

void attributes_mismatch() {
  throw Error("internal error: a kernel registered for an op reads attributes of another class");
}

std::vector<DeviceType> kernel_device_types() {
  std::vector<DeviceType> r;
  for (auto& [type, ops] : table()) r.push_back(type);
  std::sort(r.begin(), r.end());
  return r;
}

const Kernel* lookup_kernel(Device device, const std::string& domain, const std::string& name) {
  auto d = table().find(device.type);
  if (d == table().end()) return nullptr;
  auto ops = d->second.find(domain_of(domain));
  if (ops == d->second.end()) return nullptr;
  auto k = ops->second.find(name);
  return k == ops->second.end() ? nullptr : &k->second;
}

const Kernel& find_kernel(Device device, const ir::Node& n) {
  const Kernel* k = lookup_kernel(device, n.domain, n.op_type);
  if (!k)
    throw UnsupportedError(n.where() + ": op " + (n.domain.empty() ? "" : n.domain + ".") + n.op_type +
                           " has no kernel on " + device.str());
  return *k;
}

Dim scratch_bytes(Device device, const ir::Node& n) {
  const Kernel& k = find_kernel(device, n);
  if (!k.scratch) return Dim(0);
  ops::InferCtx shapes(n, ops::symbolic_inputs(n), nullptr);
  for (size_t i = 0; i < n.outputs.size(); ++i)
    if (const ir::Value* v = n.outputs[i]) shapes.set(i, v->dtype, v->shape, v->sym_value);
  try {
    for (const ir::Value* v : n.inputs)
      if (v && !v->has_shape) throw ShapeError("an input's shape depends on data");
    for (const ir::Value* v : n.outputs)
      if (v && !v->has_shape) throw ShapeError("an output's shape depends on data");
    return k.scratch(*n.op, shapes);
  } catch (const ShapeError&) {
    return Dim::symbol("scratch(" + n.name + ")");
  }
}

void KernelCtx::fail(const std::string& msg) const { throw ShapeError(node.where() + ": " + msg); }

void KernelCtx::inputs_like_first(size_t count) const {
  for (size_t i = 1; i < count; ++i)
    if (in(i).dims() != in(0).dims() || in(i).dtype() != in(0).dtype())
      fail("input " + std::to_string(i) + " " + dims_str(in(i).dims()) + " is not shaped as input 0 " +
           dims_str(in(0).dims()));
}

void KernelCtx::absent(const char* what, size_t i) const {
  fail(std::string(what) + " " + std::to_string(i) + " is not given");
}

void KernelCtx::scratch_overrun(size_t need) const {
  throw Error(node.where() + ": internal error: the kernel needs " + std::to_string(need) + " bytes of scratch, " +
              std::to_string(scratch_bytes) + " were declared");
}

}  // namespace onnxtrain::kernels
