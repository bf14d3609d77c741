#include "kernels/kernel.h"

#include <unordered_map>

#include "onnxtrain/error.h"

namespace onnxtrain::kernels {

// (device, domain, op) -> kernel; "ai.onnx" is the default domain "".
static std::unordered_map<std::string, Kernel>& table() {
  static std::unordered_map<std::string, Kernel> t;
  return t;
}

static std::string key(Device device, const std::string& domain, const std::string& name) {
  return std::to_string(device.id) + ":" + (domain == "ai.onnx" ? std::string() : domain) + ":" + name;
}

bool register_kernels(Device device, std::vector<KernelDef> defs) {
  for (auto& d : defs) table()[key(device, d.domain, d.name)] = Kernel{std::move(d.fn), std::move(d.scratch)};
  return true;
}

void attributes_mismatch() {
  throw Error("internal error: a kernel registered for an op reads attributes of another class");
}

const Kernel* lookup_kernel(Device device, const std::string& domain, const std::string& name) {
  auto it = table().find(key(device, domain, name));
  return it == table().end() ? nullptr : &it->second;
}

const Kernel& find_kernel(Device device, const ir::Node& n) {
  auto it = table().find(key(device, n.domain, n.op_type));
  if (it == table().end())
    throw UnsupportedError(n.where() + ": op " + (n.domain.empty() ? "" : n.domain + ".") + n.op_type +
                           " has no kernel on " + device.str());
  return it->second;
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

void KernelCtx::scratch_overrun(size_t need) const {
  throw Error(node.where() + ": internal error: the kernel needs " + std::to_string(need) + " bytes of scratch, " +
              std::to_string(scratch_bytes) + " were declared");
}

}  // namespace onnxtrain::kernels
