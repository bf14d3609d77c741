// Session::ops_without_kernel: which ops of a compiled graph another device could not run (a model on the CPU
// checked for a GPU before one is at hand; CI's check that every op of the families' training graphs has a CUDA
// kernel).
#include <algorithm>
#include <set>

#include "kernels/kernel.h"
#include "onnxtrain/error.h"
#include "ops/op.h"
#include "runtime/session_impl.h"

namespace onnxtrain {

std::vector<std::string> Session::ops_without_kernel(Device device) const {
  const auto types = kernels::kernel_device_types();
  if (std::find(types.begin(), types.end(), device.type) == types.end())
    throw UnsupportedError(device.str() + ": this build has no kernels for it");
  std::set<std::string> missing;
  for (const auto& n : impl_->graph().nodes())
    if (!(n->op && n->op->is_view()) && !kernels::lookup_kernel(device, n->domain, n->op_type))
      missing.insert((n->domain.empty() ? "" : n->domain + ".") + n->op_type);
  return {missing.begin(), missing.end()};
}

}  // namespace onnxtrain
