// `onnxtrain conformance DIR...`: runs ONNX backend node-test folders
// (model.onnx + test_data_set_*/{input,output}_*.pb) and reports
// "N passed, M failed, K skipped".
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>

#include "core/allocator.h"
#include "ir/onnx_io.h"
#include "onnxtrain/session.h"
#include "runtime/session_impl.h"
#include "tools/commands.h"
#include "tools/conformance/node_test.h"

namespace fs = std::filesystem;

namespace onnxtrain::cli {
namespace {

// A training-mode Dropout with a nonzero ratio draws from NumPy in the reference.
bool uses_numpy_dropout(const ir::Graph& g, const std::map<std::string, Tensor>& feeds) {
  for (auto& n : g.nodes()) {
    if (n->op_type != "Dropout") continue;
    auto fed = [&](size_t i) -> const Tensor* {
      ir::Value* v = n->input(i);
      if (!v) return nullptr;
      if (v->initializer) return &*v->initializer;
      auto it = feeds.find(v->name);
      return it == feeds.end() ? nullptr : &it->second;
    };
    const Tensor* training = fed(2);
    if (!training || training->to_int64()[0] == 0) continue;
    const Tensor* ratio = fed(1);
    if (!ratio || ratio->to_double()[0] != 0) return true;
  }
  return false;
}

Result run_test(const fs::path& dir) {
  std::unique_ptr<ir::Graph> graph;
  try {
    graph = ir::load_model_file((dir / "model.onnx").string());
  } catch (const UnsupportedError& e) {
    return {Outcome::kSkip, e.what()};
  }
  for (auto& n : graph->nodes())
    if (is_numpy_random_op(n->op_type)) return {Outcome::kSkip, "expected values come from NumPy's random generator"};
  std::vector<std::string> input_names, output_names;
  for (auto* v : graph->inputs) input_names.push_back(v->name);
  for (auto* v : graph->outputs) output_names.push_back(v->name);
  std::unique_ptr<Session> session;
  try {
    session = std::make_unique<Session>(inference_session(std::move(graph)));
  } catch (const UnsupportedError& e) {
    return {Outcome::kSkip, e.what()};
  }
  Tolerance tol = read_tolerance(dir);
  auto sets = sorted_files(dir, "test_data_set_");
  if (sets.empty()) return {Outcome::kSkip, "no test data sets"};
  for (auto& set : sets) {
    std::map<std::string, Tensor> feeds;
    Result read = read_inputs(set, input_names, &feeds);
    if (read.outcome != Outcome::kPass) return read;
    if (uses_numpy_dropout(session->impl().graph(), feeds))
      return {Outcome::kSkip, "expected values come from NumPy's random generator"};
    std::map<std::string, Tensor> outs;
    try {
      outs = session->run(feeds);
    } catch (const UnsupportedError& e) {
      return {Outcome::kSkip, e.what()};
    } catch (const Error& e) {
      return {Outcome::kFail, e.what()};
    }
    auto expected = sorted_files(set, "output_");
    for (size_t i = 0; i < expected.size() && i < output_names.size(); ++i) {
      Tensor want;
      try {
        want = ir::load_tensor_file(expected[i].string());
      } catch (const Error& e) {
        return {Outcome::kSkip, std::string("expected output: ") + e.what()};
      }
      std::string diff = compare(outs.at(output_names[i]), want, "output '" + output_names[i] + "'", tol);
      if (!diff.empty()) return {Outcome::kFail, set.filename().string() + ": " + diff};
    }
  }
  return {Outcome::kPass, ""};
}

}  // namespace

void add_conformance(CLI::App& app) {
  auto* cmd = app.add_subcommand("conformance", "Run ONNX backend node-test folders");
  struct Args {
    std::vector<std::string> dirs;
    std::string skip_list;
    bool verbose = false;
    std::string as;
    std::string device = "cpu";
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("dirs", a->dirs, "test folders, or folders of test folders")->required();
  cmd->add_flag("-v,--verbose", a->verbose, "also print passing tests");
  cmd->add_option("--as", a->as,
                  "bfloat16 or float16: run each test's float32 inputs rounded to it, against the float32 run of the "
                  "rounded inputs rounded to it");
  cmd->add_option("--device", a->device,
                  "cpu (the default: against the suite's outputs), or another device such as cuda or cuda:1: each "
                  "test run there, against its run on the CPU; tests with an op the device has no kernel for skip");
  cmd->add_option("--skip-list", a->skip_list,
                  "a file of 'test_name: reason' lines: tests reported as skips with that reason");
  cmd->callback([a] {
    DType as = DType::kUndefined;
    if (a->as == "bfloat16")
      as = DType::kBFloat16;
    else if (a->as == "float16")
      as = DType::kFloat16;
    else if (!a->as.empty())
      throw InputError("conformance: --as takes bfloat16 or float16, not '" + a->as + "'");
    const Device device = parse_device(a->device);
    if (!(device == kCpu) && as != DType::kUndefined)
      throw InputError("conformance: --as and --device go one at a time");
    if (!(device == kCpu)) CachingAllocator::of(device);  // a device this build or machine lacks: said once, here
    std::vector<fs::path> tests;
    for (auto& d : a->dirs) {
      if (!fs::is_directory(d)) throw IoError("conformance: '" + d + "' is not a folder");
      if (fs::exists(fs::path(d) / "model.onnx"))
        tests.push_back(d);
      else
        for (auto& e : fs::directory_iterator(d))
          if (fs::exists(e.path() / "model.onnx")) tests.push_back(e.path());
    }
    std::sort(tests.begin(), tests.end());
    std::map<std::string, std::string> listed;
    if (!a->skip_list.empty()) {
      std::ifstream f(a->skip_list);
      if (!f) throw IoError("conformance: cannot read the skip list '" + a->skip_list + "'");
      for (std::string line; std::getline(f, line);) {
        auto colon = line.find(':');
        if (line.empty() || line[0] == '#' || colon == std::string::npos) continue;
        listed[line.substr(0, colon)] = line.substr(colon + 2);
      }
    }
    int passed = 0, failed = 0, skipped = 0;
    for (auto& t : tests) {
      Result r;
      std::string name = t.filename().string();
      if (listed.count(name)) {
        r = {Outcome::kSkip, listed[name]};
      } else {
        try {
          r = !(device == kCpu)          ? run_test_on(t, device)
              : as == DType::kUndefined ? run_test(t)
                                        : run_test_as(t, as);
        } catch (const std::exception& e) {
          r = {Outcome::kFail, e.what()};
        }
      }
      if (r.outcome == Outcome::kPass) {
        ++passed;
        if (a->verbose) std::cout << "PASS " << name << "\n";
      } else if (r.outcome == Outcome::kFail) {
        ++failed;
        std::cout << "FAIL " << name << ": " << r.reason << "\n";
      } else {
        ++skipped;
        std::cout << "SKIP " << name << ": " << r.reason << "\n";
      }
    }
    std::cout << passed << " passed, " << failed << " failed, " << skipped << " skipped\n";
    set_exit_code(failed ? 1 : 0);
  });
}

}  // namespace onnxtrain::cli
