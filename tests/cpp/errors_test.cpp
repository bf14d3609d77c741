// Every bad input raises a typed error whose message says where and what.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <filesystem>
#include <fstream>

#include "ir/onnx_io.h"
#include "onnxtrain/session.h"
#include "runtime/session_impl.h"
#include "test_graphs.h"

using namespace onnxtrain;

namespace {

template <typename E, typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error of the expected type";
  return "";
}

std::string mlp_bytes() {
  onnx::ModelProto m;
  ir::export_model(*test_graphs::mlp_graph(), &m);
  return m.SerializeAsString();
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST(Errors, MissingModelFile) {
  auto m = error_of<IoError>([] { Session::load("/nonexistent/model.onnx"); });
  EXPECT_TRUE(has(m, "'/nonexistent/model.onnx' does not exist")) << m;
}

TEST(Errors, TruncatedModel) {
  std::string bytes = mlp_bytes();
  auto path = std::filesystem::temp_directory_path() / "onnxtrain_truncated.onnx";
  std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size() / 2));
  auto m = error_of<ModelError>([&] { Session::load(path.string()); });
  EXPECT_TRUE(has(m, "not a valid ONNX model (truncated or corrupt)")) << m;
}

TEST(Errors, MalformedBytesAndEmptyBytes) {
  auto m = error_of<ModelError>([] { Session::from_bytes("\x08\x01garbage\xff\xff"); });
  EXPECT_TRUE(has(m, "not a valid ONNX ModelProto")) << m;
  m = error_of<ModelError>([] { Session::from_bytes(""); });
  EXPECT_TRUE(has(m, "empty")) << m;
}

TEST(Errors, UnsupportedOpNamesOpDomainOpsetAndNode) {
  auto g = test_graphs::mlp_graph();
  g->nodes()[2]->op_type = "FancyRelu";
  g->nodes()[2]->domain = "com.example";
  g->nodes()[2]->opset = 3;
  std::string node = g->nodes()[2]->name;
  auto m = error_of<UnsupportedError>([&] { Session s = inference_session(std::move(g)); });
  EXPECT_TRUE(has(m, "com.example.FancyRelu (opset 3)")) << m;
  EXPECT_TRUE(has(m, "node '" + node + "'")) << m;
}

TEST(Errors, WrongInputNameDtypeAndRank) {
  Session s = inference_session(test_graphs::mlp_graph());
  auto m = error_of<InputError>([&] { s.run({{"y", test_graphs::pattern_tensor({2, 8})}}); });
  EXPECT_TRUE(has(m, "input 'y' is not an input of the model (inputs: x)")) << m;
  m = error_of<InputError>([&] { s.run({}); });
  EXPECT_TRUE(has(m, "input 'x' of type float32[batch, 8] is missing")) << m;
  m = error_of<InputError>([&] { s.run({{"x", Tensor::zeros(DType::kInt64, {2, 8})}}); });
  EXPECT_TRUE(has(m, "dtype int64 given, the model expects float32")) << m;
  m = error_of<InputError>([&] { s.run({{"x", test_graphs::pattern_tensor({2, 8, 1})}}); });
  EXPECT_TRUE(has(m, "rank 3 given [2, 8, 1], the model expects float32[batch, 8]")) << m;
  m = error_of<InputError>([&] { s.run({{"x", test_graphs::pattern_tensor({2, 9})}}); });
  EXPECT_TRUE(has(m, "dim 1 is 9, the model expects float32[batch, 8]")) << m;
}

TEST(Errors, ShapeMismatchAtRunTimeNamesNodeAndShapes) {
  // Two inputs whose shapes only clash at run time: x (a, 4) + y (b, 4).
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 20;
  ir::Value* x = test_graphs::add_input(*g, "x", DType::kFloat32, {Dim::symbol("a"), Dim(4)});
  ir::Value* y = test_graphs::add_input(*g, "y", DType::kFloat32, {Dim::symbol("b"), Dim(4)});
  g->outputs.push_back(test_graphs::add_op(*g, "Add", {x, y}));
  std::string node = g->nodes()[0]->name;
  Session s = inference_session(std::move(g));
  auto m = error_of<ShapeError>([&] {
    s.run({{"x", test_graphs::pattern_tensor({3, 4})}, {"y", test_graphs::pattern_tensor({5, 4})}});
  });
  EXPECT_TRUE(has(m, "node '" + node + "' (Add)")) << m;
  EXPECT_TRUE(has(m, "cannot broadcast shapes [3, 4] and [5, 4]")) << m;
}

TEST(Errors, BadAttributeKindIsAModelError) {
  auto g = test_graphs::mlp_graph();
  g->nodes().back()->attrs["axis"] = std::string("last");
  auto m = error_of<ModelError>([&] { Session s = inference_session(std::move(g)); });
  EXPECT_TRUE(has(m, "attribute 'axis' is string, expected int")) << m;
}
