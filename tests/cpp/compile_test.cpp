// compile_training: an Executable is data that predictions read without a Session, and a budget on the step's
// peak is met by the compile step's search.
#include "runtime/compile.h"

#include <gtest/gtest.h>

#include "memory/predict.h"
#include "onnxtrain/error.h"
#include "test_graphs.h"

using namespace onnxtrain;
using test_graphs::add_input;
using test_graphs::add_op;

namespace {

// loss = sum of a chain of `depth` MatMul + Gelu layers of width 64: each Gelu output is stashed.
std::unique_ptr<ir::Graph> gelu_chain(int depth) {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 20;
  ir::Value* h = add_input(*g, "x", DType::kFloat32, {Dim::symbol("batch"), Dim(64)});
  for (int i = 0; i < depth; ++i)
    h = add_op(
        *g, "Gelu",
        {add_op(*g, "MatMul", {h, add_input(*g, "w" + std::to_string(i), DType::kFloat32, {Dim(64), Dim(64)})})});
  g->outputs.push_back(add_op(*g, "ReduceSum", {h}, {{"keepdims", int64_t(0)}}));
  return g;
}

memory::Executable compile(const memory::Budget& budget, const std::string& config = "") {
  auto g = gelu_chain(6);
  TrainingSpec spec{{"w0", "w1", "w2", "w3", "w4", "w5"}, g->outputs[0]->name};
  runtime::CompileOptions o;
  o.memory.budget = budget;
  o.memory.config = memory::parse_config(config);
  o.memory.dims = {{"batch", 256}};
  return runtime::compile_training(std::move(g), spec, o);
}

}  // namespace

TEST(Compile, TheExecutableIsDataThatPredictionsRead) {
  memory::Executable e = compile({});
  ASSERT_TRUE(e.training);
  ASSERT_TRUE(e.without_plans);
  EXPECT_EQ(e.schedule.size(), e.plan.steps().size());
  for (size_t s = 0; s < e.schedule.size(); ++s) EXPECT_EQ(s >= e.boundary, e.schedule[s]->backward);
  MemoryPrediction p = memory::predict(e, {{"batch", 256}});
  EXPECT_EQ(p.peak, *e.plan.predicted_peak({{"batch", 256}}));
  EXPECT_EQ(p.parameters, 6 * 64 * 64 * 4);
  // No plans asked for, but those taken at every level: the five Gelu outputs read in backward (by the next
  // MatMul's gradient) are recomputed from their inputs, which GeluGrad keeps anyway.
  EXPECT_EQ(memory::predict(*e.without_plans, {{"batch", 256}}).stash - p.stash, 5 * 256 * 64 * 4);
  EXPECT_EQ(e.report.every_level, 5);
  EXPECT_THROW(memory::predict(e, {}), ConfigError);                              // the batch is needed
}

TEST(Compile, ABudgetOnTheStepsPeakIsMetByPlanningCandidateGraphs) {
  const Bindings dims{{"batch", 256}};
  const std::string stashed = "Gelu+:0:0";  // the Gelu outputs stashed (not taken at every level) ...
  const int64_t plain = memory::predict(compile({}, stashed), dims).total();
  memory::Budget budget;
  budget.peak_bytes = plain - 3 * 256 * 64 * 4;  // ... and a budget of three of them less
  memory::Executable e = compile(budget, stashed);
  const int64_t planned = memory::predict(e, dims).total();
  EXPECT_LE(planned, budget.peak_bytes);
  EXPECT_EQ(memory::predict(*e.without_plans, dims).total(), plain);
  EXPECT_NE(e.report.budget.find("with them"), std::string::npos) << e.report.budget;
  EXPECT_EQ(e.report.budget.find("missed"), std::string::npos) << e.report.budget;
  int64_t applied = 0;
  for (auto& c : e.report.clusters) applied += c.applied;
  EXPECT_GE(applied, 1);
  budget.peak_bytes = 1;  // cannot be met: every plan, and the report says by how much it missed
  EXPECT_NE(compile(budget, stashed).report.budget.find("missed by"), std::string::npos);
}
