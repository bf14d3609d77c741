// `onnxtrain conformance --as bfloat16|float16`: every node test with float32 inputs run in a low-precision dtype,
// against onnxtrain's float32 run (itself checked by the plain mode) of the same rounded inputs, its outputs rounded
// to that dtype. A per-op test of every kernel that takes the dtype, on the suites' shapes and attributes.
#include <onnx/defs/schema.h>

#include <algorithm>
#include <cmath>

#include "ir/onnx_io.h"
#include "onnxtrain/session.h"
#include "runtime/session_impl.h"
#include "tools/conformance/node_test.h"

namespace fs = std::filesystem;

namespace onnxtrain::cli {
namespace {

// t rounded to `as`, and the rounded values again as float32.
std::pair<Tensor, Tensor> rounded(const Tensor& t, DType as) {
  Tensor low(as, t.dims()), wide(DType::kFloat32, t.dims());
  const float* x = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (as == DType::kBFloat16) {
      low.data<BFloat16>()[i] = BFloat16(x[i]);
      wide.data<float>()[i] = float(low.data<BFloat16>()[i]);
    } else {
      low.data<Half>()[i] = Half(x[i]);
      wide.data<float>()[i] = float(low.data<Half>()[i]);
    }
  }
  return {low, wide};
}

// Why a test cannot run in another dtype as it stands ("" if it can): a dtype named inside the graph.
std::string pinned_dtype(const ir::Graph& g) {
  for (const ir::Value* v : g.initializers)
    if (v->dtype == DType::kFloat32) return "a float32 initializer";
  for (auto& n : g.nodes()) {
    if (is_numpy_random_op(n->op_type)) return "expected values come from NumPy's random generator";
    if (n->op_type == "Cast" || n->op_type == "CastLike" || n->has_attr("value") || n->has_attr("dtype") ||
        n->has_attr("to") || n->has_attr("output_dtype") || n->has_attr("stash_type"))
      return n->op_type + " names a dtype";
  }
  return "";
}

// Whether every node reading graph input v may take it in `as`, by the ONNX schema's type constraints (Resize's
// scales stay float32, say).
bool takes(const ir::Graph& g, const ir::Value* v, DType as) {
  const std::string want = as == DType::kBFloat16 ? "tensor(bfloat16)" : "tensor(float16)";
  for (const ir::Node* n : v->consumers) {
    int opset = n->opset ? int(n->opset) : int(g.opsets.count(n->domain) ? g.opsets.at(n->domain) : 0);
    const onnx::OpSchema* schema = onnx::OpSchemaRegistry::Schema(n->op_type, opset, n->domain);
    if (!schema || schema->inputs().empty()) return false;
    for (size_t k = 0; k < n->inputs.size(); ++k) {
      if (n->inputs[k] != v) continue;
      const auto& formal = schema->inputs()[std::min(k, schema->inputs().size() - 1)];
      std::vector<std::string> allowed = {formal.GetTypeStr()};
      for (const auto& c : schema->typeConstraintParams())
        if (c.type_param_str == formal.GetTypeStr()) allowed = c.allowed_type_strs;
      if (std::find(allowed.begin(), allowed.end(), want) == allowed.end()) return false;
    }
  }
  return !v->consumers.empty();
}

}  // namespace

Result run_test_as(const fs::path& dir, DType as) {
  std::unique_ptr<ir::Graph> low, wide;
  try {
    low = ir::load_model_file((dir / "model.onnx").string());
    wide = ir::load_model_file((dir / "model.onnx").string());
  } catch (const UnsupportedError& e) {
    return {Outcome::kSkip, e.what()};
  }
  if (std::string why = pinned_dtype(*low); !why.empty()) return {Outcome::kSkip, why};
  if (low->nodes().size() != 1)  // intermediate values would round to `as`, which the float32 run does not do
    return {Outcome::kSkip, "more than one node"};
  std::vector<std::string> input_names, output_names;
  bool any = false;
  for (ir::Value* v : low->inputs) {
    input_names.push_back(v->name);
    if (v->dtype == DType::kFloat32 && takes(*low, v, as)) v->dtype = as, any = true;
  }
  if (!any) return {Outcome::kSkip, std::string("no float32 input that may be ") + dtype_name(as)};
  for (ir::Value* v : low->outputs) output_names.push_back(v->name);
  std::unique_ptr<Session> low_run, wide_run;
  try {
    wide_run = std::make_unique<Session>(inference_session(std::move(wide)));
    low_run = std::make_unique<Session>(inference_session(std::move(low)));
  } catch (const UnsupportedError& e) {
    return {Outcome::kSkip, e.what()};
  } catch (const Error& e) {
    return {Outcome::kFail, std::string("in ") + dtype_name(as) + ": " + e.what()};
  }
  auto sets = sorted_files(dir, "test_data_set_");
  if (sets.empty()) return {Outcome::kSkip, "no test data sets"};
  for (auto& set : sets) {
    std::map<std::string, Tensor> feeds, low_feeds, wide_feeds;
    Result read = read_inputs(set, input_names, &feeds);
    if (read.outcome != Outcome::kPass) return read;
    for (auto& [name, t] : feeds) {
      if (low_run->impl().graph().find(name)->dtype != as) {
        low_feeds[name] = wide_feeds[name] = t;
        continue;
      }
      std::tie(low_feeds[name], wide_feeds[name]) = rounded(t, as);
    }
    std::map<std::string, Tensor> got, want;
    try {
      want = wide_run->run(wide_feeds);
    } catch (const Error& e) {
      return {Outcome::kSkip, std::string("in float32: ") + e.what()};
    }
    try {
      got = low_run->run(low_feeds);
    } catch (const UnsupportedError& e) {
      return {Outcome::kSkip, e.what()};
    } catch (const Error& e) {
      return {Outcome::kFail, std::string("in ") + dtype_name(as) + ": " + e.what()};
    }
    for (auto& name : output_names) {
      Tensor w = want.at(name);
      Tolerance tol;
      if (w.dtype() == DType::kFloat32) {
        double scale = 0;
        for (double x : w.to_double())
          if (std::isfinite(x)) scale = std::max(scale, std::abs(x));
        tol.atol = scale * 0x1p-12;  // sums that cancel: float32 order differences, seen at the output's scale
        w = rounded(w, as).first;
      }
      std::string diff = compare(got.at(name), w, "output '" + name + "'", tol);
      if (!diff.empty()) return {Outcome::kFail, set.filename().string() + ": " + diff};
    }
  }
  return {Outcome::kPass, ""};
}

}  // namespace onnxtrain::cli
