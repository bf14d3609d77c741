#include "tools/conformance/node_test.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include "ir/onnx_io.h"
#include "onnxtrain/error.h"

namespace fs = std::filesystem;

namespace onnxtrain::cli {

bool is_numpy_random_op(const std::string& op) {
  return op == "Bernoulli" || op == "RandomNormal" || op == "RandomUniform" || op == "RandomNormalLike" ||
         op == "RandomUniformLike" || op == "Multinomial";
}

std::vector<fs::path> sorted_files(const fs::path& dir, const std::string& prefix) {
  std::vector<fs::path> r;
  for (auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind(prefix, 0) == 0) r.push_back(e.path());
  std::sort(r.begin(), r.end(), [&](const fs::path& a, const fs::path& b) {
    auto num = [&](const fs::path& p) {
      std::string s = p.stem().string().substr(prefix.size());
      return s.empty() ? 0 : std::stoi(s);
    };
    return num(a) < num(b);
  });
  return r;
}

Tolerance read_tolerance(const fs::path& dir) {
  Tolerance t;
  std::ifstream f(dir / "tolerance.txt");
  if (f) f >> t.rtol >> t.atol;
  return t;
}

std::string compare(const Tensor& got, const Tensor& want, const std::string& name, Tolerance tol) {
  if (got.dtype() != want.dtype())
    return name + ": dtype " + dtype_name(got.dtype()) + ", expected " + dtype_name(want.dtype());
  if (got.dims() != want.dims())
    return name + ": shape " + dims_str(got.dims()) + ", expected " + dims_str(want.dims());
  // Low-precision outputs: at least two units in their last place, relative (the reference rounds every
  // intermediate of an expanded function to that dtype, onnxtrain's kernels round once, at the end).
  if (want.dtype() == DType::kBFloat16) tol.rtol = std::max(tol.rtol, 0x1p-7);
  if (want.dtype() == DType::kFloat16) tol.rtol = std::max(tol.rtol, 0x1p-9);
  auto g = got.to_double(), w = want.to_double();
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(w[i]) && std::isnan(g[i])) continue;
    if (std::isinf(w[i]) && g[i] == w[i]) continue;
    if (!(std::abs(g[i] - w[i]) <= tol.atol + tol.rtol * std::abs(w[i])))
      return name + ": value " + std::to_string(g[i]) + " at index " + std::to_string(i) + ", expected " +
             std::to_string(w[i]);
  }
  return "";
}

Result read_inputs(const fs::path& set, const std::vector<std::string>& input_names,
                   std::map<std::string, Tensor>* feeds) {
  auto inputs = sorted_files(set, "input_");
  for (size_t i = 0; i < inputs.size(); ++i) {
    onnx::TensorProto p;
    std::ifstream f(inputs[i], std::ios::binary);
    if (!p.ParseFromIstream(&f) || (p.dims_size() == 0 && p.data_type() == 0))
      return {Outcome::kSkip, "input " + std::to_string(i) + " is not a tensor (sequence or optional)"};
    if (i >= input_names.size()) return {Outcome::kFail, "more input files than model inputs"};
    try {
      (*feeds)[input_names[i]] = ir::tensor_from_proto(p, set.string(), "input");
    } catch (const UnsupportedError& e) {
      return {Outcome::kSkip, e.what()};
    }
  }
  return {Outcome::kPass, ""};
}

}  // namespace onnxtrain::cli
