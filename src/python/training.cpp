// TrainingSession: ONNX models with a loss, trained by onnxtrain's optimizers.
#include <pybind11/stl.h>

#include "onnxtrain/training_session.h"
#include "python/dlpack_bridge.h"
#include "python/init.h"

namespace py = pybind11;

namespace onnxtrain::python {

void init_training(py::module_& m) {
  py::class_<OptimizerOptions>(m, "OptimizerOptions",
                               "Optimizer hyper-parameters (PyTorch's AdamW and SGD conventions).")
      .def(py::init([](const std::string& kind, double lr, double weight_decay, double momentum, bool nesterov,
                       double beta1, double beta2, double eps) {
             return OptimizerOptions{kind, lr, weight_decay, momentum, nesterov, beta1, beta2, eps};
           }),
           py::arg("kind") = "adamw", py::arg("lr") = 1e-3, py::arg("weight_decay") = 0.0, py::arg("momentum") = 0.0,
           py::arg("nesterov") = false, py::arg("beta1") = 0.9, py::arg("beta2") = 0.999, py::arg("eps") = 1e-8);

  py::class_<TrainingSession>(m, "TrainingSession",
                              "Trains an ONNX model whose graph computes a scalar loss, on options.device (its "
                              "parameters, gradients and optimizer state there; batches copied there).")
      .def(py::init([](const std::string& path, const std::string& loss, const OptimizerOptions& opt,
                       const SessionOptions& options) { return TrainingSession::load(path, loss, opt, options); }),
           py::arg("path"), py::arg("loss"), py::arg("optimizer") = OptimizerOptions(),
           py::arg("options") = SessionOptions())
      .def(
          "train_step",
          [](TrainingSession& s, const py::dict& inputs) {
            auto in = tensors_of(inputs);
            py::gil_scoped_release nogil;
            return s.train_step(in);
          },
          py::arg("inputs"), "Forward and backward on one batch; returns the loss; gradients accumulate.")
      .def(
          "eval_step",
          [](TrainingSession& s, const py::dict& inputs) {
            auto in = tensors_of(inputs);
            py::gil_scoped_release nogil;
            return s.eval_step(in);
          },
          py::arg("inputs"), "The loss of one batch, without gradients.")
      .def("optimizer_step", &TrainingSession::optimizer_step, "Applies the accumulated gradients.")
      .def("lazy_reset_grad", &TrainingSession::lazy_reset_grad, "The next train_step starts a new accumulation.")
      .def_property("learning_rate", &TrainingSession::learning_rate, &TrainingSession::set_learning_rate)
      .def(
          "set_schedule",
          [](TrainingSession& s, int64_t warmup, int64_t total, double final_fraction) {
            s.set_schedule(LrSchedule{warmup, total, final_fraction});
          },
          py::arg("warmup_steps"), py::arg("total_steps"), py::arg("final_fraction") = 0.0,
          "Linear warm-up, then linear decay to final_fraction of the learning rate at total_steps.")
      .def_property_readonly("step", &TrainingSession::step)
      .def_property_readonly("parameter_names", &TrainingSession::parameter_names)
      .def_property_readonly("input_names", &TrainingSession::input_names)
      .def_property_readonly("last_stash_bytes", &TrainingSession::last_stash_bytes)
      .def(
          "parameter", [](TrainingSession& s, const std::string& name) { return to_numpy(s.tensor(name)); },
          py::arg("name"),
          "A parameter or buffer, sharing memory with the session: a numpy array on the CPU, an onnxtrain tensor "
          "(DLPack: torch.from_dlpack) on a GPU.")
      .def("save_checkpoint", &TrainingSession::save_checkpoint, py::arg("path"))
      .def("load_checkpoint", &TrainingSession::load_checkpoint, py::arg("path"))
      .def("export_model_for_inferencing", &TrainingSession::export_model_for_inferencing, py::arg("path"),
           py::arg("outputs") = std::vector<std::string>{});
}

}  // namespace onnxtrain::python
