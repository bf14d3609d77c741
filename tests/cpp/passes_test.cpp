// Each pass on a graph built in code: op counts before and after, identical results.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "kernels/shape_inference.h"
#include "onnxtrain/session.h"
#include "ops/bind.h"
#include "passes/pass.h"
#include "runtime/session_impl.h"
#include "test_graphs.h"

using namespace onnxtrain;
using test_graphs::add_input;
using test_graphs::add_op;
using test_graphs::add_weight;

namespace {

size_t count(const ir::Graph& g, const std::string& op) {
  size_t k = 0;
  for (auto& n : g.nodes()) k += n->op_type == op;
  return k;
}

// Runs a graph made by `make` with and without optimization on x (batch, 4): the same results, bit for bit, or
// within `rounding` of each where a pass hands a product its operand transposed (oneDNN's GEMM may then sum in
// another order).
void expect_same_results(std::unique_ptr<ir::Graph> (*make)(), float rounding = 0) {
  SessionOptions plain;
  plain.optimize = false;
  Session a = inference_session(make(), plain);
  Session b = inference_session(make());
  Tensor x = test_graphs::pattern_tensor({3, 4});
  auto ya = a.run({{"x", x}}), yb = b.run({{"x", x}});
  for (auto& [name, t] : ya) {
    const Tensor& u = yb.at(name);
    ASSERT_EQ(t.dims(), u.dims());
    for (int64_t i = 0; i < t.numel(); ++i) {
      const float want = t.data<float>()[i];
      EXPECT_NEAR(u.data<float>()[i], want, rounding * std::abs(want)) << name << "[" << i << "]";
    }
  }
}

// The graph `make` builds, bound and shaped, after `pass`, which must change it.
std::unique_ptr<ir::Graph> after(std::unique_ptr<ir::Graph> (*make)(), std::unique_ptr<passes::Pass> pass) {
  auto g = make();
  ops::bind_graph(*g);
  kernels::infer_shapes(*g);
  EXPECT_TRUE(pass->apply(*g)) << pass->name();
  return g;
}

std::unique_ptr<ir::Graph> base() {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 20;
  return g;
}

std::unique_ptr<ir::Graph> with_dead_branch() {
  auto g = base();
  ir::Value* x = add_input(*g, "x", DType::kFloat32, {Dim::symbol("batch"), Dim(4)});
  ir::Value* used = add_op(*g, "Relu", {x});
  add_op(*g, "Exp", {add_op(*g, "Neg", {x})});  // read by nobody
  g->outputs.push_back(add_op(*g, "Tanh", {used}));
  return g;
}

std::unique_ptr<ir::Graph> with_repeats() {
  auto g = base();
  ir::Value* x = add_input(*g, "x", DType::kFloat32, {Dim::symbol("batch"), Dim(4)});
  ir::Value* a = add_op(*g, "Sigmoid", {x});
  ir::Value* b = add_op(*g, "Sigmoid", {x});
  ir::Value* sa = add_op(*g, "Shape", {x});
  ir::Value* sb = add_op(*g, "Shape", {x});
  ir::Value* sum = add_op(*g, "Add", {a, b});
  g->outputs.push_back(add_op(*g, "Reshape", {add_op(*g, "Reshape", {sum, sa}), sb}));
  return g;
}

std::unique_ptr<ir::Graph> with_constants() {
  auto g = base();
  ir::Value* x = add_input(*g, "x", DType::kFloat32, {Dim(3), Dim(4)});
  ir::Value* w = add_op(*g, "Mul", {add_weight(*g, "w", {4}), add_weight(*g, "v", {4})});  // constant
  ir::Value* shape = add_op(*g, "Shape", {x});                                             // known: x is static
  g->outputs.push_back(add_op(*g, "Reshape", {add_op(*g, "Add", {x, w}), shape}));
  return g;
}

}  // namespace

TEST(Passes, DeadCodeRemovesUnreadNodes) {
  auto g = with_dead_branch();
  ops::bind_graph(*g);
  kernels::infer_shapes(*g);
  EXPECT_EQ(g->nodes().size(), 4u);
  EXPECT_TRUE(passes::dead_code()->apply(*g));
  EXPECT_EQ(g->nodes().size(), 2u);
  EXPECT_EQ(count(*g, "Exp") + count(*g, "Neg"), 0u);
  EXPECT_FALSE(passes::dead_code()->apply(*g));
  expect_same_results(with_dead_branch);
}

TEST(Passes, CommonSubexpressionsMergeEqualNodes) {
  auto g = with_repeats();
  ops::bind_graph(*g);
  kernels::infer_shapes(*g);
  EXPECT_TRUE(passes::common_subexpressions()->apply(*g));
  EXPECT_EQ(count(*g, "Sigmoid"), 1u);
  EXPECT_EQ(count(*g, "Shape"), 1u);
  expect_same_results(with_repeats);
}

TEST(Passes, ConstantFoldingRunsConstantNodesAndKnownShapes) {
  auto g = with_constants();
  ops::bind_graph(*g);
  kernels::infer_shapes(*g);
  EXPECT_TRUE(passes::constant_folding()->apply(*g));
  EXPECT_EQ(count(*g, "Mul"), 0u);
  EXPECT_EQ(count(*g, "Shape"), 0u);  // shape arithmetic on known dims folds
  EXPECT_EQ(count(*g, "Add"), 1u);
  expect_same_results(with_constants);
}

namespace {

ir::Value* scalar(ir::Graph& g, float v, DType dtype = DType::kFloat32) {
  ir::Value* c = g.add_value("");
  Tensor t(dtype, {});
  if (dtype == DType::kBFloat16)
    *t.data<BFloat16>() = BFloat16(v);
  else
    *t.data<float>() = v;
  c->initializer = t;
  c->dtype = dtype;
  c->has_shape = true;
  g.initializers.push_back(c);
  return c;
}

// x * 0.5 * (1 + erf(x / sqrt(2))), as PyTorch's TorchScript exporter writes GELU (in bf16 under autocast, its
// constants rounded), then a Dropout of ratio 0.
std::unique_ptr<ir::Graph> erf_gelu(DType t = DType::kFloat32) {
  auto g = base();
  ir::Value* x = add_input(*g, "x", t, {Dim::symbol("batch"), Dim(4)});
  ir::Value* e = add_op(*g, "Erf", {add_op(*g, "Div", {x, scalar(*g, 1.4142135f, t)})});
  ir::Value* y =
      add_op(*g, "Mul", {add_op(*g, "Mul", {x, add_op(*g, "Add", {e, scalar(*g, 1.0f, t)})}), scalar(*g, 0.5f, t)});
  g->outputs.push_back(add_op(*g, "Tanh", {add_op(*g, "Dropout", {y, scalar(*g, 0.0f)})}));
  return g;
}

}  // namespace

TEST(Passes, GeluFusionReadsBf16Constants) {
  auto g = erf_gelu(DType::kBFloat16);
  ops::bind_graph(*g);
  kernels::infer_shapes(*g);
  EXPECT_TRUE(passes::gelu_fusion()->apply(*g));
  EXPECT_EQ(count(*g, "Gelu"), 1u);
}

TEST(Passes, GeluFusionAndIdentityElimination) {
  auto g = erf_gelu();
  ops::bind_graph(*g);
  kernels::infer_shapes(*g);
  EXPECT_TRUE(passes::gelu_fusion()->apply(*g));
  EXPECT_EQ(count(*g, "Gelu"), 1u);
  EXPECT_EQ(count(*g, "Erf") + count(*g, "Mul") + count(*g, "Div"), 0u);
  EXPECT_TRUE(passes::identity_elimination()->apply(*g));
  EXPECT_EQ(count(*g, "Dropout"), 0u);
  EXPECT_EQ(g->nodes().size(), 2u);  // Gelu, Tanh
  SessionOptions plain;
  plain.optimize = false;
  Session a = inference_session(erf_gelu(), plain);
  Session b = inference_session(erf_gelu());
  Tensor x = test_graphs::pattern_tensor({3, 4});
  Tensor ya = a.run({{"x", x}}).begin()->second, yb = b.run({{"x", x}}).begin()->second;
  for (int64_t i = 0; i < ya.numel(); ++i) EXPECT_NEAR(ya.data<float>()[i], yb.data<float>()[i], 1e-6);
}

// x in bf16, widened to float32 for a tanh Gelu whose output goes back to bf16 (CUDA's autocast around GPT-2's MLP
// activation), then to float32 as the graph's output; `also_out`: the float32 Gelu is an output too.
std::unique_ptr<ir::Graph> widened_gelu(bool also_out) {
  auto g = base();
  ir::Value* x = add_input(*g, "x", DType::kFloat32, {Dim::symbol("batch"), Dim(4)});
  auto cast = [&](ir::Value* v, DType t) { return add_op(*g, "Cast", {v}, {{"to", int64_t(t)}}); };
  ir::Value* y = add_op(*g, "Gelu", {cast(cast(x, DType::kBFloat16), DType::kFloat32)},
                        {{"approximate", std::string("tanh")}});
  g->outputs.push_back(cast(cast(y, DType::kBFloat16), DType::kFloat32));
  if (also_out) g->outputs.push_back(y);
  return g;
}

// The float32 Gelu between a widening Cast and a Cast back becomes a bf16 Gelu, with the same bits; not where the
// float32 activation is read otherwise.
TEST(Passes, AGeluBetweenCastsComputesInSixteenBits) {
  auto narrowed = after([] { return widened_gelu(false); }, passes::narrow_gelu());
  ASSERT_EQ(count(*narrowed, "Gelu"), 1u);
  for (const auto& n : narrowed->nodes())
    if (n->op_type == "Gelu") {
      EXPECT_EQ(n->input(0)->dtype, DType::kBFloat16);
      EXPECT_EQ(n->outputs[0]->dtype, DType::kBFloat16);
      EXPECT_EQ(n->attr_string("approximate", ""), "tanh");
    }
  EXPECT_EQ(count(*narrowed, "Cast"), 3u);  // (the widening one left unread, for dead code)
  expect_same_results([] { return widened_gelu(false); });
  auto kept = widened_gelu(true);
  ops::bind_graph(*kept);
  kernels::infer_shapes(*kept);
  EXPECT_FALSE(passes::narrow_gelu()->apply(*kept));
}

// CastLike(x's last dim, x) becomes Cast(to = x's dtype): x is read by Shape and Relu alone, and the result is the
// same.
TEST(Passes, CastLikeBecomesACastToItsSecondInputsDtype) {
  auto make = [] {
    auto g = base();
    ir::Value* x = add_input(*g, "x", DType::kFloat32, {Dim::symbol("batch"), Dim(4)});
    ir::Value* n = add_op(*g, "CastLike", {add_op(*g, "Shape", {x}, {{"start", int64_t(-1)}}), x});
    g->outputs.push_back(add_op(*g, "Add", {add_op(*g, "Relu", {x}), n}));
    return g;
  };
  auto g = make();
  ops::bind_graph(*g);
  kernels::infer_shapes(*g);
  EXPECT_TRUE(passes::cast_like_to_cast()->apply(*g));
  EXPECT_EQ(count(*g, "CastLike"), 0u);
  ASSERT_EQ(count(*g, "Cast"), 1u);
  for (const auto& node : g->nodes())
    if (node->op_type == "Cast") {
      EXPECT_EQ(node->attr_int("to", 0), int64_t(DType::kFloat32));
    }
  EXPECT_EQ(g->inputs[0]->consumers.size(), 2u);  // Shape and Relu
  SessionOptions plain;
  plain.optimize = false;
  Tensor x = test_graphs::pattern_tensor({3, 4});
  Tensor ya = inference_session(make(), plain).run({{"x", x}}).begin()->second;
  Tensor yb = inference_session(make()).run({{"x", x}}).begin()->second;
  for (int64_t i = 0; i < ya.numel(); ++i) EXPECT_EQ(ya.data<float>()[i], yb.data<float>()[i]);
}

namespace {

// Transpose(Gemm(x, w)) and, with transB, Transpose(Gemm(x, v^T)): each folds into one Gemm.
std::unique_ptr<ir::Graph> transposed_gemms() {
  auto g = base();
  ir::Value* x = add_input(*g, "x", DType::kFloat32, {Dim::symbol("batch"), Dim(4)});
  ir::Value* a = add_op(*g, "Gemm", {x, add_weight(*g, "w", {4, 5})});
  g->outputs.push_back(add_op(*g, "Transpose", {a}, {{"perm", std::vector<int64_t>{1, 0}}}));
  ir::Value* b = add_op(*g, "Gemm", {x, add_weight(*g, "v", {6, 4})}, {{"transB", int64_t(1)}, {"alpha", 0.5f}});
  g->outputs.push_back(add_op(*g, "Transpose", {b}));
  return g;
}

}  // namespace

TEST(Passes, TransposeOfGemmFoldsIntoTheGemm) {
  auto g = after(transposed_gemms, passes::transpose_gemm_fusion());
  EXPECT_EQ(count(*g, "Transpose"), 0u);
  EXPECT_EQ(count(*g, "Gemm"), 2u);
  EXPECT_EQ(shape_str(g->outputs[0]->shape), "[5, batch]");
  EXPECT_EQ(g->outputs[0]->producer->op_type, "Gemm");
  expect_same_results(transposed_gemms);
}

namespace {

// Linear layers as exporters write them: Add(MatMul(x, Transpose(w)), b), one without a bias, and one whose
// transposed weight is read twice (left alone).
std::unique_ptr<ir::Graph> linear_layers() {
  auto g = base();
  ir::Value* x = add_input(*g, "x", DType::kFloat32, {Dim::symbol("batch"), Dim(4)});
  ir::Value* wt = add_op(*g, "Transpose", {add_weight(*g, "w", {6, 4})});
  ir::Value* h = add_op(*g, "Add", {add_op(*g, "MatMul", {x, wt}), add_weight(*g, "b", {6})});
  ir::Value* vt = add_op(*g, "Transpose", {add_weight(*g, "v", {4, 6})});
  g->outputs.push_back(add_op(*g, "MatMul", {h, vt}));
  ir::Value* ut = add_op(*g, "Transpose", {add_weight(*g, "u", {3, 4})});
  g->outputs.push_back(add_op(*g, "MatMul", {x, ut}));
  g->outputs.push_back(ut);
  return g;
}

}  // namespace

TEST(Passes, LinearFusionMakesOneNodeOfEachLinearLayer) {
  auto g = after(linear_layers, passes::linear_fusion());
  EXPECT_EQ(count(*g, "Linear"), 2u);
  EXPECT_EQ(count(*g, "Add"), 0u);
  EXPECT_EQ(count(*g, "MatMul"), 1u);  // the one whose transposed weight is also an output
  EXPECT_EQ(count(*g, "Transpose"), 1u);
  EXPECT_EQ(shape_str(g->outputs[0]->shape), "[batch, 4]");
  expect_same_results(linear_layers, 1e-6f);
}

namespace {

// Attention's scores as exporters write them: Softmax(Where(causal, -inf, Mul(x, 0.5))) over the last axis.
std::unique_ptr<ir::Graph> masked_scores() {
  auto g = base();
  ir::Value* x = add_input(*g, "x", DType::kFloat32, {Dim::symbol("batch"), Dim(4)});
  ir::Value* cond = g->add_value("causal");
  Tensor c(DType::kBool, {4});
  for (int i = 0; i < 4; ++i) c.data<bool>()[i] = i == 2;
  cond->initializer = c;
  cond->dtype = DType::kBool;
  cond->shape = const_shape({4});
  cond->has_shape = true;
  g->initializers.push_back(cond);
  ir::Value* scaled = add_op(*g, "Mul", {x, test_graphs::add_scalar(*g, "scale", 0.5f)});
  ir::Value* masked = add_op(*g, "Where", {cond, test_graphs::add_scalar(*g, "fill", -INFINITY), scaled});
  g->outputs.push_back(add_op(*g, "Softmax", {masked}, {{"axis", int64_t(-1)}}));
  return g;
}

// The same scores made by a product: Softmax(Where(causal, -inf, Mul(MatMul(x, w), 0.5))).
std::unique_ptr<ir::Graph> product_scores() {
  auto g = masked_scores();
  ir::Value* x = g->inputs[0];
  ir::Value* scores = add_op(*g, "MatMul", {x, test_graphs::add_weight(*g, "w", {4, 4})});
  for (auto& n : g->nodes())
    if (n->op_type == "Mul") n->inputs[0] = scores, scores->consumers.push_back(n.get());
  x->consumers.erase(
      std::remove_if(x->consumers.begin(), x->consumers.end(), [&](auto* c) { return c->op_type == "Mul"; }),
      x->consumers.end());
  g->sort_nodes();
  return g;
}

}  // namespace

TEST(Passes, AttentionSoftmaxFusionTakesTheScoresProductIn) {
  auto g = product_scores();
  ops::bind_graph(*g);
  kernels::infer_shapes(*g);
  ASSERT_TRUE(passes::masked_softmax_fusion()->apply(*g));
  ASSERT_TRUE(passes::attention_softmax_fusion()->apply(*g));
  EXPECT_EQ(count(*g, "AttentionSoftmax"), 1u);
  EXPECT_EQ(count(*g, "MatMul") + count(*g, "MaskedSoftmax"), 0u);
  SessionOptions plain;
  plain.optimize = false;
  Session a = inference_session(product_scores(), plain);
  Session b = inference_session(product_scores());
  Tensor x = test_graphs::pattern_tensor({3, 4});
  Tensor ya = a.run({{"x", x}}).begin()->second, yb = b.run({{"x", x}}).begin()->second;
  ASSERT_EQ(ya.dims(), yb.dims());
  for (int64_t i = 0; i < ya.numel(); ++i) EXPECT_NEAR(ya.data<float>()[i], yb.data<float>()[i], 1e-6f) << i;
  EXPECT_EQ(ya.data<float>()[2], 0.f);  // the masked column
}

TEST(Passes, MaskedSoftmaxFusionMakesOneNodeOfScaleMaskAndSoftmax) {
  auto g = after(masked_scores, passes::masked_softmax_fusion());
  EXPECT_EQ(count(*g, "MaskedSoftmax"), 1u);
  EXPECT_EQ(count(*g, "Softmax") + count(*g, "Where") + count(*g, "Mul"), 0u);
  expect_same_results(masked_scores);
}
