// Session: tensors in and out without copies (DLPack: numpy arrays, torch tensors, onnxtrain.Tensor).
#include <pybind11/stl.h>

#include "memory/layers.h"
#include "ops/op.h"
#include "python/dlpack_bridge.h"
#include "python/init.h"
#include "runtime/session_impl.h"

namespace py = pybind11;

namespace onnxtrain::python {
namespace {

#define STREAM_DOC                                                                                             \
  "`stream`: the queue its work goes on, as an integer handle (PyTorch's current CUDA stream: "                \
  "torch.cuda.current_stream().cuda_stream, so that it is ordered with PyTorch's work without waiting); 0, the " \
  "device's default. The outputs record it: handing one to a consumer on another stream waits for it first."

// The calling thread's work for `s` on `stream`, an integer handle (0: the device's default queue), until the call
// returns: the outputs made into Python objects inside it record the queue they were made on.
QueueScope on_stream(const Session& s, uintptr_t stream) {
  return QueueScope(s.impl().alloc->device(), reinterpret_cast<void*>(stream));
}

}  // namespace

void init_session(py::module_& m) {
  m.def("registered_ops", &ops::registered_ops, "Every op in onnxtrain's op table (domain.name for other domains).");
  py::class_<RunState>(m, "RunState", "The stash of one forward call, for its backward call.")
      .def_property_readonly("stash_bytes", &RunState::stash_bytes, "Bytes of the activations it holds.")
      .def_property_readonly("seed", &RunState::seed, "The seed its random ops drew from.")
      .def("stash_values", &RunState::stash_values, "Each stashed activation: {value name: bytes}.");

  py::class_<Session>(
      m, "Session",
      "Loads an ONNX model and runs it on named inputs (numpy arrays, torch tensors: anything with __dlpack__).")
      .def(py::init([](const std::string& path, const SessionOptions& o) { return Session::load(path, o); }),
           py::arg("path"), py::arg("options") = SessionOptions())
      .def_static(
          "from_bytes",
          [](py::bytes b, const SessionOptions& options) { return Session::from_bytes(std::string(b), options); },
          py::arg("model"), py::arg("options") = SessionOptions())
      .def_static(
          "for_training",
          [](py::bytes b, const std::vector<std::string>& wrt, const std::string& loss, const SessionOptions& o,
             const std::set<std::string>& running_statistics, bool unbiased_running_var) {
            TrainingSpec spec{wrt, loss, running_statistics, unbiased_running_var};
            return Session::from_bytes(std::string(b), spec, o);
          },
          py::arg("model"), py::arg("wrt"), py::arg("loss") = "", py::arg("options") = SessionOptions(),
          py::arg("running_statistics") = std::set<std::string>{}, py::arg("unbiased_running_var") = false,
          "A session with the backward graph for gradients of `wrt`: of a scalar `loss` output, or, when it "
          "is empty, of the outputs whose gradients run_backward receives. running_statistics: inputs holding "
          "BatchNorm statistics a training step updates, whose updated values become outputs (buffer_updates); "
          "unbiased_running_var: their variance moves by the unbiased batch variance (PyTorch's), not ONNX's.")
      .def_property_readonly("buffer_updates", &Session::buffer_updates,
                             "{forward output: the running_statistics input it replaces after a step}")
      .def_property_readonly("input_names", &Session::input_names)
      .def_property_readonly("output_names", &Session::output_names)
      .def_property_readonly("grad_names", &Session::grad_names)
      .def_property_readonly("gradient_order", &Session::gradient_order,
                             "grad_names in the order backward makes each gradient final")
      .def_property_readonly("output_grad_names", &Session::output_grad_names)
      .def_property_readonly("optional_output_grad_names", &Session::optional_output_grad_names,
                             "Those of output_grad_names whose gradient run_backward may be given none of.")
      .def(
          "run_forward",
          [](Session& s, const py::dict& feeds, std::optional<uint64_t> seed, uintptr_t stream) {
            auto in = tensors_of(feeds);
            QueueScope queue = on_stream(s, stream);
            std::pair<std::map<std::string, Tensor>, std::unique_ptr<RunState>> r;
            {
              py::gil_scoped_release nogil;
              r = s.run_forward(in, seed);
            }
            return py::make_tuple(arrays_of(r.first), std::move(r.second));
          },
          py::arg("feeds"), py::arg("seed") = py::none(), py::arg("stream") = 0,
          "Runs the forward part: ({output name: array}, RunState). Random ops draw from `seed` when given. "
          STREAM_DOC)
      .def(
          "run_backward",
          [](Session& s, RunState& state, const py::dict& output_grads, const py::dict& refeeds,
             const py::object& on_gradient, uintptr_t stream) {
            auto in = tensors_of(output_grads), again = tensors_of(refeeds);
            QueueScope queue = on_stream(s, stream);
            Session::GradientReady ready;
            if (!on_gradient.is_none())
              ready = [&on_gradient](const std::string& name, const Tensor& g) {
                py::gil_scoped_acquire gil;
                on_gradient(name, to_numpy(g));
              };
            std::map<std::string, Tensor> r;
            {
              py::gil_scoped_release nogil;
              r = s.run_backward(state, in, again, ready);
            }
            return arrays_of(r);
          },
          py::arg("state"), py::arg("output_grads") = py::dict(), py::arg("refeeds") = py::dict(),
          py::arg("on_gradient") = py::none(), py::arg("stream") = 0,
          "Runs the backward part: {input name: gradient}. `refeeds`: forward inputs given again (same dtypes and "
          "dims), whose memory replaces what the forward was fed (for tensors moved in between, as FSDP2's "
          "parameters). `on_gradient(name, gradient)`: called as each gradient becomes final, in the order of "
          "gradient_order, from the thread running backward. " STREAM_DOC)
      .def(
          "run",
          [](Session& s, const py::dict& feeds, uintptr_t stream) {
            auto in = tensors_of(feeds);
            QueueScope queue = on_stream(s, stream);
            std::map<std::string, Tensor> out;
            {
              py::gil_scoped_release nogil;
              out = s.run(in);
            }
            return arrays_of(out);
          },
          py::arg("feeds"), py::arg("stream") = 0, "Runs the graph; returns {output name: numpy array}. " STREAM_DOC)
      .def(
          "predicted_peak",
          [](const Session& s, const std::map<std::string, std::vector<int64_t>>& dims) {
            return s.predicted_peak(s.bind_inputs(dims));
          },
          py::arg("input_dims"),
          "Peak bytes a run with these input dims adds to the allocator (None if data-dependent).")
      .def(
          "plan", [](const Session& s) { return s.impl().exe.plan.str(); }, "The allocation plan, one line per step.")
      .def(
          "predict_memory",
          [](const Session& s, const Bindings& dims, bool without_plans) {
            MemoryPrediction p = s.predict_memory(dims, without_plans);
            py::dict d;
            d["parameters"] = p.parameters;
            d["optimizer_state"] = p.optimizer_state;
            d["gradients"] = p.gradients;
            d["stash"] = p.stash;
            d["peak"] = p.peak;
            d["at_peak"] = p.at_peak;
            d["total"] = p.total();
            return d;
          },
          py::arg("dims"), py::arg("without_plans") = false,
          "A training step's memory for these dims (bytes): parameters, optimizer_state, gradients, stash, peak "
          "(the allocator's, during the step), at_peak (the peak by category: stash, gradient, recompute, "
          "transient) and total (the whole step); without_plans: as if no recompute plan were applied.")
      .def(
          "transformer_layers", [](const Session& s) { return memory::detect_layers(s.impl().graph()).count(); },
          "How many transformer layers the memory optimizer detects in the forward graph.")
      .def("memory_timeline", &Session::memory_timeline, py::arg("dims"),
           "The predicted allocation timeline of one run for these dims, as JSON (see onnxtrain.timeline).")
      .def("start_memory_recording", &Session::start_memory_recording,
           "Records every allocation and free of the following runs until stop_memory_recording.")
      .def("stop_memory_recording", &Session::stop_memory_recording, py::arg("dims"),
           "The measured timeline of the recorded runs as JSON (memory_timeline's format plus events and "
           "measured_peak); `dims` sizes the predicted peak drawn beside it.")
      .def("largest_fitting", &Session::largest_fitting, py::arg("symbol"), py::arg("dims"), py::arg("limit"),
           "The largest value of `symbol` whose whole step (parameters, optimizer state, peak) fits in `limit` bytes.")
      .def(
          "memory_report",
          [](const Session& s, const Bindings& dims, bool as_json) { return s.memory_report_text(dims, as_json); },
          py::arg("dims") = Bindings{}, py::arg("json") = false,
          "Recompute clusters of a training session (frequency, status, bytes saved, flops, config entry), then "
          "the predicted step peak without and with the plans (for `dims`).")
      .def(
          "save", &Session::save, py::arg("path"),
          "Saves the graph the session runs (training graphs: forward and backward, after the passes) as ONNX.")
      .def(
          "ops_without_kernel",
          [](const Session& s, const std::string& device) { return s.ops_without_kernel(parse_device(device)); },
          py::arg("device"),
          "The ops of the graph the session runs with no kernel on `device` ('cuda', ...): what keeps the model "
          "from running there (UnsupportedError: this build has no kernels for that device).")
      .def("set_profiling", &Session::set_profiling, py::arg("on"),
           "Switches per-op-type timing on (resetting it) or off.")
      .def(
          "profile",
          [](const Session& s) {
            py::dict d;
            for (auto& [op, p] : s.profile()) d[py::str(op)] = py::make_tuple(p.ms, p.calls);
            return d;
          },
          "{op type: (milliseconds, calls)} since profiling was switched on.")
      .def(
          "input_types",
          [](const Session& s) {
            py::dict d;
            for (auto* v : s.impl().graph().inputs) d[py::str(v->name)] = v->type_str();
            return d;
          },
          "Each input's dtype and symbolic shape.");
}

}  // namespace onnxtrain::python
