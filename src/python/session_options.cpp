// SessionOptions: how a Session compiles its graph and runs, one object for Session, from_bytes and for_training.
// The memory optimizer's config and budget are checked when set (a rejected value changes nothing).
#include <pybind11/stl.h>

#include "memory/budget.h"
#include "memory/recompute.h"
#include "onnxtrain/session.h"
#include "python/init.h"

namespace py = pybind11;

namespace onnxtrain::python {
namespace {

void set_config(SessionOptions& o, const std::string& text) {
  memory::parse_config(text);
  o.memory_config = text;
}

void set_budget(SessionOptions& o, const std::string& text) {
  memory::parse_budget(text);
  o.memory_budget = text;
}

}  // namespace

void init_session_options(py::module_& m) {
  py::class_<SessionOptions>(
      m, "SessionOptions",
      "How a Session compiles and runs its graph. device: 'cpu' or 'cuda[:N]' (where inputs are given and outputs "
      "and gradients returned); seed: random ops' first seed; keep_cache: the allocator keeps its free blocks "
      "between steps; release_cache_after: otherwise, the seconds they may idle after a backward before they go "
      "back to the system (0: at once); allow_inplace: outputs may reuse dying inputs' buffers; optimize: the "
      "graph passes (folding, fusions). Training only: memory_level (0, 1 layer-wise recompute, 2 with "
      "compromised plans), memory_config (recompute plans, 'Id:Strategy:Count,...' or a JSON file of them), "
      "memory_budget ('' none, a fraction of the stash '0.3', or a size for the step's peak '6GiB'), memory_dims "
      "(the batch the budget and reports are sized for: {symbol: size}), optimizer_state_factor (optimizer state "
      "bytes per parameter byte counted in predictions and budgets), applied_in_backward (`wrt` entries whose "
      "gradients an optimizer applies in backward, through run_backward's on_gradient: freed then, not returned).")
      .def(py::init([](const std::string& device, uint64_t seed, bool keep_cache, double release_cache_after,
                       bool allow_inplace, bool optimize, int memory_level, const std::string& memory_config,
                       const std::string& memory_budget, const Bindings& memory_dims, double optimizer_state_factor,
                       const std::set<std::string>& applied_in_backward) {
             SessionOptions o;
             o.device = parse_device(device);
             o.seed = seed;
             o.keep_cache = keep_cache;
             o.release_cache_after = release_cache_after;
             o.allow_inplace = allow_inplace;
             o.optimize = optimize;
             o.memory_level = memory_level;
             set_config(o, memory_config);
             set_budget(o, memory_budget);
             o.memory_dims = memory_dims;
             o.optimizer_state_factor = optimizer_state_factor;
             o.applied_in_backward = applied_in_backward;
             return o;
           }),
           py::kw_only(), py::arg("device") = "cpu", py::arg("seed") = 0, py::arg("keep_cache") = false,
           py::arg("release_cache_after") = 0.0, py::arg("allow_inplace") = true, py::arg("optimize") = true,
           py::arg("memory_level") = 0, py::arg("memory_config") = "", py::arg("memory_budget") = "",
           py::arg("memory_dims") = Bindings{}, py::arg("optimizer_state_factor") = 0.0,
           py::arg("applied_in_backward") = std::set<std::string>{})
      .def_property(
          "device", [](const SessionOptions& o) { return o.device.str(); },
          [](SessionOptions& o, const std::string& d) { o.device = parse_device(d); })
      .def_readwrite("seed", &SessionOptions::seed)
      .def_readwrite("keep_cache", &SessionOptions::keep_cache)
      .def_readwrite("release_cache_after", &SessionOptions::release_cache_after)
      .def_readwrite("allow_inplace", &SessionOptions::allow_inplace)
      .def_readwrite("optimize", &SessionOptions::optimize)
      .def_readwrite("memory_level", &SessionOptions::memory_level)
      .def_property(
          "memory_config", [](const SessionOptions& o) { return o.memory_config; }, &set_config)
      .def_property(
          "memory_budget", [](const SessionOptions& o) { return o.memory_budget; }, &set_budget)
      .def_readwrite("memory_dims", &SessionOptions::memory_dims)
      .def_readwrite("optimizer_state_factor", &SessionOptions::optimizer_state_factor)
      .def_readwrite("applied_in_backward", &SessionOptions::applied_in_backward)
      .def("__repr__", [](const SessionOptions& o) {
        return "SessionOptions(device='" + o.device.str() + "', memory_level=" + std::to_string(o.memory_level) +
               ", memory_config='" + o.memory_config + "', memory_budget='" + o.memory_budget + "')";
      });
}

}  // namespace onnxtrain::python
