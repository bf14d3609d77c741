#include "kernels/kernel.h"

#include <unordered_map>

#include "onnxtrain/error.h"

namespace onnxtrain::kernels {

// (device, domain, op) -> kernel; "ai.onnx" is the default domain "".
static std::unordered_map<std::string, KernelFn>& table() {
  static std::unordered_map<std::string, KernelFn> t;
  return t;
}

static std::string key(Device device, const std::string& domain, const std::string& name) {
  return std::to_string(device.id) + ":" + (domain == "ai.onnx" ? std::string() : domain) + ":" + name;
}

bool register_kernels(Device device, std::vector<KernelDef> defs) {
  for (auto& d : defs) table()[key(device, d.domain, d.name)] = std::move(d.fn);
  return true;
}

void attributes_mismatch(const KernelCtx& c) {
  throw Error(c.node.where() + ": internal error: the kernel registered for this op reads other attributes");
}

bool has_kernel(Device device, const std::string& domain, const std::string& name) {
  return table().count(key(device, domain, name)) != 0;
}

const KernelFn& find_kernel(Device device, const ir::Node& n) {
  auto it = table().find(key(device, n.domain, n.op_type));
  if (it == table().end())
    throw UnsupportedError(n.where() + ": op " + (n.domain.empty() ? "" : n.domain + ".") + n.op_type +
                           " has no kernel on " + device.str());
  return it->second;
}

void KernelCtx::fail(const std::string& msg) const { throw ShapeError(node.where() + ": " + msg); }

}  // namespace onnxtrain::kernels
