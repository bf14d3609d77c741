// Allocator statistics and limits.
#include "memory/budget.h"
#include "onnxtrain/memory_stats.h"
#include "python/init.h"

namespace py = pybind11;

namespace onnxtrain::python {

void init_memory(py::module_& m) {
  m.def(
      "allocator_stats",
      [](const std::string& device) {
        MemoryStats s = memory_stats(parse_device(device));
        py::dict d;
        d["allocated"] = s.allocated;
        d["peak_allocated"] = s.peak_allocated;
        d["cached"] = s.cached;
        d["peak_cached"] = s.peak_cached;
        d["inactive"] = s.inactive;
        d["peak_inactive"] = s.peak_inactive;
        d["num_allocs"] = s.num_allocs;
        d["num_frees"] = s.num_frees;
        d["limit"] = s.limit;
        return d;
      },
      py::arg("device") = "cpu", "Statistics of onnxtrain's caching allocator of `device`, in bytes.");
  m.def(
      "reset_peak_stats", [](const std::string& device) { reset_peak_stats(parse_device(device)); },
      py::arg("device") = "cpu", "Sets every peak of `device`'s allocator to its current value.");
  m.def("set_memory_limit", [](int64_t bytes) { set_memory_limit(bytes); }, py::arg("bytes"),
        "Allocations past this many allocated bytes raise OutOfMemoryError; 0 removes the limit.");
  m.def(
      "check_memory_budget", [](const std::string& text) { memory::parse_budget(text); }, py::arg("text"),
      "Raises ConfigError unless `text` is a memory budget: a fraction of the stash ('0.3') or a size ('6GiB').");
  m.def(
      "empty_cache", [](const std::string& device) { empty_cache(parse_device(device)); }, py::arg("device") = "cpu",
      "Returns the unused cached blocks of `device`'s allocator to the system (a GPU's: to PyTorch's allocator, "
      "where it has them from).");
}

}  // namespace onnxtrain::python
