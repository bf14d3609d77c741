// The fused updates behind onnxtrain.optim: one call per parameter group, the GIL released while it runs.
#include <pybind11/stl.h>

#include "kernels/parameter_update.h"
#include "onnxtrain/error.h"
#include "python/dlpack_bridge.h"
#include "python/init.h"

namespace py = pybind11;

namespace onnxtrain::python {
namespace {

std::vector<Tensor> tensors(const py::list& l) {
  std::vector<Tensor> r;
  for (py::handle h : l) r.push_back(from_python(h));
  return r;
}

// A list of tensors or Nones: the tensors, and where each is.
std::vector<std::optional<Tensor>> optional_tensors(const py::list& l) {
  std::vector<std::optional<Tensor>> r;
  for (py::handle h : l) r.push_back(h.is_none() ? std::nullopt : std::optional<Tensor>(from_python(h)));
  return r;
}

// Parameter i's update queued on streams[i] (PyTorch's current stream of its device; 0, or no streams given: the
// device's default queue) while it lives.
QueueScope on_stream(const Tensor& x, const std::vector<uintptr_t>& streams, size_t i) {
  return QueueScope(x.device(), reinterpret_cast<void*>(streams.empty() ? 0 : streams[i]));
}

void same_length(size_t n, size_t m, const char* what) {
  if (n != m)
    throw InputError("onnxtrain.optim: " + std::to_string(m) + " " + what + " for " + std::to_string(n) +
                     " parameters");
}

}  // namespace

void init_optim(py::module_& m) {
  py::class_<kernels::AdamWHyper>(m, "AdamWHyper", "AdamW's hyper-parameters, as PyTorch names them.")
      .def(py::init([](double lr, double beta1, double beta2, double eps, double weight_decay, bool amsgrad,
                       bool maximize) {
             return kernels::AdamWHyper{lr, beta1, beta2, eps, weight_decay, amsgrad, maximize};
           }),
           py::arg("lr"), py::arg("beta1"), py::arg("beta2"), py::arg("eps"), py::arg("weight_decay"),
           py::arg("amsgrad"), py::arg("maximize"));
  py::class_<kernels::SgdHyper>(m, "SgdHyper", "SGD's hyper-parameters, as PyTorch names them.")
      .def(py::init([](double lr, double weight_decay, double momentum, double dampening, bool nesterov,
                       bool maximize) {
             return kernels::SgdHyper{lr, weight_decay, momentum, dampening, nesterov, maximize};
           }),
           py::arg("lr"), py::arg("weight_decay"), py::arg("momentum"), py::arg("dampening"), py::arg("nesterov"),
           py::arg("maximize"));
  m.def(
      "adamw_update",
      [](const py::list& params, const py::list& grads, const py::list& exp_avgs, const py::list& exp_avg_sqs,
         const py::list& max_exp_avg_sqs, const std::vector<int64_t>& steps, const kernels::AdamWHyper& h,
         const std::vector<uintptr_t>& streams) {
        auto x = tensors(params), g = tensors(grads), mm = tensors(exp_avgs), v = tensors(exp_avg_sqs);
        auto mx = optional_tensors(max_exp_avg_sqs);
        same_length(x.size(), g.size(), "gradients");
        same_length(x.size(), mm.size(), "exp_avg");
        same_length(x.size(), v.size(), "exp_avg_sq");
        same_length(x.size(), mx.size(), "max_exp_avg_sq (or None)");
        same_length(x.size(), steps.size(), "steps");
        if (!streams.empty()) same_length(x.size(), streams.size(), "streams");
        py::gil_scoped_release nogil;
        for (size_t i = 0; i < x.size(); ++i) {
          QueueScope queue = on_stream(x[i], streams, i);
          kernels::adamw_update("onnxtrain.optim.AdamW, parameter " + std::to_string(i), x[i], g[i], mm[i], v[i],
                                mx[i] ? &*mx[i] : nullptr, steps[i], h);
        }
      },
      py::arg("params"), py::arg("grads"), py::arg("exp_avgs"), py::arg("exp_avg_sqs"), py::arg("max_exp_avg_sqs"),
      py::arg("steps"), py::arg("hyper"), py::arg("streams") = std::vector<uintptr_t>{},
      "AdamW's update of each parameter in place (PyTorch's numerics), at its step (1 the first), on its stream (an "
      "integer handle: PyTorch's current stream of its device; 0 on the host).");
  m.def(
      "sgd_update",
      [](const py::list& params, const py::list& grads, const py::list& momentum_buffers,
         const std::vector<bool>& first, const kernels::SgdHyper& h, const std::vector<uintptr_t>& streams) {
        auto x = tensors(params), g = tensors(grads);
        auto b = optional_tensors(momentum_buffers);
        same_length(x.size(), g.size(), "gradients");
        same_length(x.size(), b.size(), "momentum buffers (or None)");
        same_length(x.size(), first.size(), "first-step flags");
        if (!streams.empty()) same_length(x.size(), streams.size(), "streams");
        py::gil_scoped_release nogil;
        for (size_t i = 0; i < x.size(); ++i) {
          QueueScope queue = on_stream(x[i], streams, i);
          kernels::sgd_update("onnxtrain.optim.SGD, parameter " + std::to_string(i), x[i], g[i],
                              b[i] ? &*b[i] : nullptr, first[i], h);
        }
      },
      py::arg("params"), py::arg("grads"), py::arg("momentum_buffers"), py::arg("first"), py::arg("hyper"),
      py::arg("streams") = std::vector<uintptr_t>{},
      "SGD's update of each parameter in place (PyTorch's numerics), on its stream (as adamw_update's); a first step "
      "sets its momentum buffer.");
}

}  // namespace onnxtrain::python
