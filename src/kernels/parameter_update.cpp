#include "kernels/parameter_update.h"

#include "kernels/cpu/parameter_update.h"
#include "onnxtrain/error.h"

namespace onnxtrain::kernels {

static void check_like(const std::string& where, const Tensor& x, const Tensor* t, const char* what) {
  if (!t) return;
  if (t->dtype() != x.dtype() || t->numel() != x.numel())
    throw InputError(where + ": " + what + " is " + dtype_name(t->dtype()) + " " + dims_str(t->dims()) +
                     ", the parameter " + dtype_name(x.dtype()) + " " + dims_str(x.dims()));
}

// An UnsupportedError naming `where` unless all of `ts` are on the host (the one device with these kernels).
static void on_host(const std::string& where, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (t && t->storage() && !(t->storage()->device() == kCpu))
      throw UnsupportedError(where + ": no parameter update kernel on " + t->storage()->device().str());
}

void adamw_update(const std::string& where, Tensor& x, const Tensor& g, Tensor& m, Tensor& v, Tensor* max_v,
                  int64_t step, const AdamWHyper& h) {
  check_like(where, x, &g, "the gradient");
  check_like(where, x, &m, "exp_avg");
  check_like(where, x, &v, "exp_avg_sq");
  check_like(where, x, max_v, "max_exp_avg_sq");
  if (h.amsgrad != (max_v != nullptr)) throw InputError(where + ": amsgrad needs max_exp_avg_sq, and only it");
  if (step < 1) throw InputError(where + ": step " + std::to_string(step) + " (the first is 1)");
  on_host(where, {&x, &g, &m, &v, max_v});
  cpu::adamw_update(where, x, g, m, v, max_v, step, h);
}

void sgd_update(const std::string& where, Tensor& x, const Tensor& g, Tensor* buf, bool first, const SgdHyper& h) {
  check_like(where, x, &g, "the gradient");
  check_like(where, x, buf, "momentum_buffer");
  if ((h.momentum != 0) != (buf != nullptr))
    throw InputError(where + ": momentum needs a momentum buffer, and only it");
  on_host(where, {&x, &g, buf});
  cpu::sgd_update(where, x, g, buf, first, h);
}

void accumulate_gradient(const std::string& where, Tensor& acc, const Tensor& g) {
  check_like(where, acc, &g, "the gradient");
  on_host(where, {&acc, &g});
  cpu::accumulate_gradient(where, acc, g);
}

}  // namespace onnxtrain::kernels
