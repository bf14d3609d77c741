// SessionOptions: how a Session compiles its graph and runs, one object for Session, from_bytes and for_training.
// The memory optimizer's config and budget are given as text (ONNX Runtime's grammar, "0.3", "6GiB"), checked when
// set, and read back in canonical form.
#include <pybind11/stl.h>

#include <cstdio>

#include "onnxtrain/session.h"
#include "python/init.h"

namespace py = pybind11;

namespace onnxtrain::python {
namespace {

std::string config_text(const SessionOptions& o) {
  std::string r;
  for (const auto& e : o.memory.config)
    r += (r.empty() ? "" : ",") + e.cluster + ":" + std::to_string(e.strategy) + ":" + std::to_string(e.count);
  return r;
}

std::string budget_text(const SessionOptions& o) {
  const memory::Budget& b = o.memory.budget;
  if (b.peak_bytes) return std::to_string(b.peak_bytes) + "B";
  if (b.stash_fraction == 0) return "";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", b.stash_fraction);
  return buf;
}

void set_budget(SessionOptions& o, const std::string& text) { o.memory.budget = memory::parse_budget(text); }

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
             o.memory.level = memory_level;
             o.memory.config = memory::parse_config(memory_config);
             set_budget(o, memory_budget);
             o.memory.dims = memory_dims;
             o.memory.optimizer_state_factor = optimizer_state_factor;
             o.memory.applied_in_backward = applied_in_backward;
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
      .def_property(
          "memory_level", [](const SessionOptions& o) { return o.memory.level; },
          [](SessionOptions& o, int level) { o.memory.level = level; })
      .def_property("memory_config", &config_text,
                    [](SessionOptions& o, const std::string& t) { o.memory.config = memory::parse_config(t); })
      .def_property("memory_budget", &budget_text, &set_budget)
      .def_property(
          "memory_dims", [](const SessionOptions& o) { return o.memory.dims; },
          [](SessionOptions& o, const Bindings& d) { o.memory.dims = d; })
      .def_property(
          "optimizer_state_factor", [](const SessionOptions& o) { return o.memory.optimizer_state_factor; },
          [](SessionOptions& o, double f) { o.memory.optimizer_state_factor = f; })
      .def_property(
          "applied_in_backward", [](const SessionOptions& o) { return o.memory.applied_in_backward; },
          [](SessionOptions& o, const std::set<std::string>& s) { o.memory.applied_in_backward = s; })
      .def("__repr__", [](const SessionOptions& o) {
        return "SessionOptions(device='" + o.device.str() + "', memory_level=" + std::to_string(o.memory.level) +
               ", memory_config='" + config_text(o) + "', memory_budget='" + budget_text(o) + "')";
      });
}

}  // namespace onnxtrain::python
