// Op::host_inputs is checked wherever a node runs: a shape function that reads the data of an input its op does
// not declare is an internal error naming the node and the input (the conformance suites and every test run
// under this check, so the declarations of the op table are exercised by them).
#include <gtest/gtest.h>

#include "kernels/kernel.h"
#include "kernels/run_node.h"
#include "onnxtrain/error.h"
#include "ops/bind.h"
#include "ops/op.h"
#include "test_graphs.h"

namespace onnxtrain {
namespace {

// Output 0 is a vector as long as input 1's first element says; `declared` decides whether it says so.
template <bool declared>
class LengthFromInput : public ops::Op {
 public:
  explicit LengthFromInput(const ir::Node&) {}
  uint64_t host_inputs() const override { return declared ? ops::input_bits({1}) : 0; }
  void infer(ops::InferCtx& ctx) const override {
    auto v = ctx.int_values(1);
    ctx.set(0, DType::kFloat32, {v ? Dim((*v)[0]) : ctx.fresh("length")});
  }
};

void zeros(kernels::KernelCtx& c) {
  for (int64_t i = 0; i < c.out(0).numel(); ++i) c.out(0).data<float>()[i] = 0;
}

const bool kRegistered = ops::register_ops({{"test.host", "Declared", ops::factory<LengthFromInput<true>>()},
                                            {"test.host", "Undeclared", ops::factory<LengthFromInput<false>>()}}) &&
                         kernels::register_kernels(kCpu, {{"test.host", "Declared", kernels::kernel(zeros)},
                                                          {"test.host", "Undeclared", kernels::kernel(zeros)}});

std::vector<Tensor> run(const std::string& op) {
  ir::Graph g;
  ir::Value* x = test_graphs::add_input(g, "x", DType::kFloat32, {Dim(2)});
  ir::Value* n = test_graphs::add_input(g, "n", DType::kInt64, {Dim(1)});
  ir::Value* y = g.add_value("y");
  ir::Node* node = g.add_node(op, {x, n}, {y});
  node->domain = "test.host";
  ops::bind_graph(g);
  Tensor xs = Tensor::zeros(DType::kFloat32, {2}), ns(DType::kInt64, {1});
  ns.data<int64_t>()[0] = 5;
  return kernels::run_node(*node, {&xs, &ns});
}

TEST(HostInputs, ADeclaredReadRuns) { EXPECT_EQ(run("Declared")[0].numel(), 5); }

TEST(HostInputs, AnUndeclaredReadIsAnInternalErrorNamingTheInput) {
  try {
    run("Undeclared");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("read the data of input 1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace onnxtrain
