// `onnxtrain conformance --device cuda`: every node test run on another device, against the same test run on the
// CPU (whose kernels the plain mode checks against the suite): a per-op test of each kernel the device has, on the
// suites' shapes, dtypes and attributes. A test with an op the device has no kernel for is a skip.
#include <algorithm>
#include <cmath>

#include "core/allocator.h"
#include "ir/onnx_io.h"
#include "onnxtrain/session.h"
#include "runtime/session_impl.h"
#include "tools/conformance/node_test.h"

namespace fs = std::filesystem;

namespace onnxtrain::cli {

Result run_test_on(const fs::path& dir, Device device) {
  std::unique_ptr<ir::Graph> on_cpu, on_device;
  try {
    on_cpu = ir::load_model_file((dir / "model.onnx").string());
    on_device = ir::load_model_file((dir / "model.onnx").string());
  } catch (const UnsupportedError& e) {
    return {Outcome::kSkip, e.what()};
  }
  for (auto& n : on_cpu->nodes())
    if (is_numpy_random_op(n->op_type)) return {Outcome::kSkip, "expected values come from NumPy's random generator"};
  std::vector<std::string> input_names, output_names;
  for (auto* v : on_cpu->inputs) input_names.push_back(v->name);
  for (auto* v : on_cpu->outputs) output_names.push_back(v->name);
  CachingAllocator& alloc = CachingAllocator::of(device);
  SessionOptions options;
  options.device = device;
  std::unique_ptr<Session> cpu_run, device_run;
  try {
    cpu_run = std::make_unique<Session>(inference_session(std::move(on_cpu)));
    device_run = std::make_unique<Session>(inference_session(std::move(on_device), options));
  } catch (const UnsupportedError& e) {
    return {Outcome::kSkip, e.what()};
  } catch (const Error& e) {
    return {Outcome::kFail, std::string("on ") + device.str() + ": " + e.what()};
  }
  auto sets = sorted_files(dir, "test_data_set_");
  if (sets.empty()) return {Outcome::kSkip, "no test data sets"};
  for (auto& set : sets) {
    std::map<std::string, Tensor> feeds, device_feeds;
    Result read = read_inputs(set, input_names, &feeds);
    if (read.outcome != Outcome::kPass) return read;
    for (auto& [name, t] : feeds) device_feeds[name] = t.clone(&alloc);
    std::map<std::string, Tensor> want, got;
    try {
      want = cpu_run->run(feeds);
    } catch (const Error& e) {
      return {Outcome::kSkip, std::string("on the CPU: ") + e.what()};
    }
    try {
      got = device_run->run(device_feeds);
    } catch (const UnsupportedError& e) {
      return {Outcome::kSkip, e.what()};
    } catch (const Error& e) {
      return {Outcome::kFail, std::string("on ") + device.str() + ": " + e.what()};
    }
    for (auto& name : output_names) {
      const Tensor& w = want.at(name);
      const Tensor& g = got.at(name);
      if (!(g.device() == device))
        return {Outcome::kFail, "output '" + name + "' is on " + g.device().str() + ", not " + device.str()};
      Tolerance tol = read_tolerance(dir);
      if (dtype_is_float(w.dtype())) {  // sums in another order: float32 differences at the output's scale
        double scale = 0;
        for (double x : w.to_double())
          if (std::isfinite(x)) scale = std::max(scale, std::abs(x));
        tol.rtol = std::max(tol.rtol, 1e-5);
        tol.atol = std::max(tol.atol, scale * 0x1p-18);
      }
      std::string diff = compare(g.clone(&CachingAllocator::global()), w, "output '" + name + "'", tol);
      if (!diff.empty()) return {Outcome::kFail, set.filename().string() + ": " + diff};
    }
  }
  return {Outcome::kPass, ""};
}

}  // namespace onnxtrain::cli
