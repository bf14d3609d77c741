#include "kernels/parameter_update.h"

#include <map>
#include <optional>

#include "onnxtrain/error.h"

namespace onnxtrain::kernels {

static std::map<DeviceType, ParameterUpdateKernels>& table() {
  static std::map<DeviceType, ParameterUpdateKernels> t;
  return t;
}

bool register_parameter_updates(DeviceType type, ParameterUpdateKernels k) {
  table()[type] = k;
  return true;
}

const ParameterUpdateKernels* parameter_updates_of(DeviceType type) {
  auto k = table().find(type);
  return k == table().end() ? nullptr : &k->second;
}

static void check_like(const std::string& where, const Tensor& x, const Tensor* t, const char* what) {
  if (!t) return;
  if (t->dtype() != x.dtype() || t->numel() != x.numel())
    throw InputError(where + ": " + what + " is " + dtype_name(t->dtype()) + " " + dims_str(t->dims()) +
                     ", the parameter " + dtype_name(x.dtype()) + " " + dims_str(x.dims()));
}

// The update kernels of the device all of `ts` are on: an InputError naming `where` when they are on several, an
// UnsupportedError when that device has none.
static const ParameterUpdateKernels& kernels_for(const std::string& where, std::initializer_list<const Tensor*> ts) {
  std::optional<Device> device;
  for (const Tensor* t : ts) {
    if (!t || !t->storage()) continue;
    Device d = t->storage()->device();
    if (device && !(*device == d))
      throw InputError(where + ": tensors on " + device->str() + " and " + d.str() + " in one update");
    device = d;
  }
  Device d = device.value_or(kCpu);
  const ParameterUpdateKernels* k = parameter_updates_of(d.type);
  if (!k) throw UnsupportedError(where + ": no parameter update kernel on " + d.str());
  return *k;
}

void adamw_update(const std::string& where, Tensor& x, const Tensor& g, Tensor& m, Tensor& v, Tensor* max_v,
                  int64_t step, const AdamWHyper& h) {
  check_like(where, x, &g, "the gradient");
  check_like(where, x, &m, "exp_avg");
  check_like(where, x, &v, "exp_avg_sq");
  check_like(where, x, max_v, "max_exp_avg_sq");
  if (h.amsgrad != (max_v != nullptr)) throw InputError(where + ": amsgrad needs max_exp_avg_sq, and only it");
  if (step < 1) throw InputError(where + ": step " + std::to_string(step) + " (the first is 1)");
  kernels_for(where, {&x, &g, &m, &v, max_v}).adamw(where, x, g, m, v, max_v, step, h);
}

void sgd_update(const std::string& where, Tensor& x, const Tensor& g, Tensor* buf, bool first, const SgdHyper& h) {
  check_like(where, x, &g, "the gradient");
  check_like(where, x, buf, "momentum_buffer");
  if ((h.momentum != 0) != (buf != nullptr))
    throw InputError(where + ": momentum needs a momentum buffer, and only it");
  kernels_for(where, {&x, &g, buf}).sgd(where, x, g, buf, first, h);
}

void accumulate_gradient(const std::string& where, Tensor& acc, const Tensor& g) {
  check_like(where, acc, &g, "the gradient");
  kernels_for(where, {&acc, &g}).accumulate(where, acc, g);
}

}  // namespace onnxtrain::kernels
