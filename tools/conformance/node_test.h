// What the conformance command's two modes share: a node test's outcome, its files in order, its inputs, and the
// comparison of an output with the expected one.
#pragma once
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "onnxtrain/tensor.h"

namespace onnxtrain::cli {

enum class Outcome { kPass, kFail, kSkip };
struct Result {
  Outcome outcome;
  std::string reason;
};

// Ops whose reference outputs come from NumPy's random generator.
bool is_numpy_random_op(const std::string& op);
// The files of `dir` named <prefix><n>..., by n.
std::vector<std::filesystem::path> sorted_files(const std::filesystem::path& dir, const std::string& prefix);

struct Tolerance {
  double rtol = 1e-3, atol = 1e-7;  // the ONNX backend suite's defaults
};
// A test folder may carry its own tolerances in tolerance.txt ("rtol atol").
Tolerance read_tolerance(const std::filesystem::path& dir);
// "" when got matches want within tol, else what differs, named `name`.
std::string compare(const Tensor& got, const Tensor& want, const std::string& name, Tolerance tol);

// The inputs of one test data set by input name; a skip when one is not a tensor or has a dtype onnxtrain lacks.
Result read_inputs(const std::filesystem::path& set, const std::vector<std::string>& input_names,
                   std::map<std::string, Tensor>* feeds);

// `onnxtrain conformance --as DTYPE`: a test's float32 inputs rounded to DTYPE and run in it, against the float32
// run of the same rounded inputs, rounded to DTYPE.
Result run_test_as(const std::filesystem::path& dir, DType as);

// `onnxtrain conformance --device DEVICE`: a test run on `device`, against its run on the CPU.
Result run_test_on(const std::filesystem::path& dir, Device device);

}  // namespace onnxtrain::cli
