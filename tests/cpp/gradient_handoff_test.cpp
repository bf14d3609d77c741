// Gradients applied in backward (SessionOptions::applied_in_backward): each handed over once it is final and its
// parameter, or a view of it, is read no more; freed then, as the plan predicts; not among those returned.
#include <gtest/gtest.h>

#include <cstring>

#include "memory/allocation_plan.h"
#include "memory/gradient_handoff.h"
#include "onnxtrain/session.h"
#include "ops/bind.h"
#include "runtime/session_impl.h"
#include "test_graphs.h"

using namespace onnxtrain;
using namespace onnxtrain::test_graphs;

namespace {

// g = Neg(p) (p's "gradient"), then p read by a Mul and, through a Reshape's view, by a second Mul.
struct Chain {
  std::unique_ptr<ir::Graph> g = std::make_unique<ir::Graph>();
  ir::Value *p, *grad;
  std::vector<const ir::Node*> order;

  Chain() {
    g->opsets[""] = 20;
    p = add_input(*g, "p", DType::kFloat32, {Dim(4)});
    ir::Value* q = add_input(*g, "q", DType::kFloat32, {Dim(4)});
    grad = add_op(*g, "Neg", {p});
    ir::Value* a = add_op(*g, "Mul", {p, q});
    ir::Value* view = add_op(*g, "Identity", {p});
    ir::Value* b = add_op(*g, "Mul", {view, a});
    g->outputs = {grad, b};
    for (auto& n : g->nodes()) order.push_back(n.get());
  }
};

}  // namespace

TEST(GradientHandoff, AfterTheLastReaderOfTheParameterOrAViewOfIt) {
  Chain c;
  ops::bind_graph(*c.g);
  auto at = memory::handoff_steps(*c.g, c.order, {"p"}, {c.grad}, {"p"});
  ASSERT_EQ(at.size(), 1u);
  const bool identity_is_a_view = c.order[2]->op && c.order[2]->op->is_view();
  EXPECT_EQ(at[0], identity_is_a_view ? 3 : 2);  // the gradient is made at step 0
  EXPECT_EQ(memory::handoff_steps(*c.g, c.order, {"p"}, {c.grad}, {}), std::vector<int>{-1});  // not applied
  EXPECT_EQ(memory::handoff_steps(*c.g, c.order, {"p", "q"}, {c.grad, c.grad}, {"p", "q"}),
            (std::vector<int>{-1, -1}));  // one gradient for two entries: returned, not applied
}

TEST(GradientHandoff, ThePlanFreesAHandedGradientAfterItsStep) {
  Chain c;
  ops::bind_graph(*c.g);
  auto kept = memory::AllocationPlan::build(*c.g, c.order);
  auto handed = memory::AllocationPlan::build(*c.g, c.order, true, kCpu, {{c.grad, 1}});
  EXPECT_EQ(kept.value(c.grad).last_use, INT32_MAX);
  EXPECT_EQ(handed.value(c.grad).last_use, 1);
  const auto& frees = handed.steps()[1].frees;
  EXPECT_NE(std::find(frees.begin(), frees.end(), c.grad), frees.end()) << handed.str();
}

namespace {

Tensor copy_of(const Tensor& t) {
  Tensor c(t.dtype(), t.dims());
  std::memcpy(c.raw(), t.raw(), t.nbytes());
  return c;
}

}  // namespace

TEST(GradientHandoff, AnUpdateAtTheHandoffChangesNoOtherGradientAndTheGradientGoes) {
  CachingAllocator alloc;
  SessionOptions plain, applied;
  plain.allocator = applied.allocator = &alloc;
  applied.applied_in_backward = {"w"};
  Session ref = training_session(viewed_weight_graph(), TrainingSpec{{"x", "w"}, ""}, plain);
  Session s = training_session(viewed_weight_graph(), TrainingSpec{{"x", "w"}, ""}, applied);
  const std::string y = s.output_names().at(0);
  Tensor x = pattern_tensor({5, 8}), w = pattern_tensor({32}), dy = pattern_tensor({5, 4});
  auto [out0, state0] = ref.run_forward({{"x", x}, {"w", copy_of(w)}});
  auto want = ref.run_backward(*state0, {{y, dy}});

  Tensor held = copy_of(w);
  alloc.reset_peaks();
  const int64_t before = alloc.stats().allocated;
  auto [out, state] = s.run_forward({{"x", x}, {"w", held}});
  out.clear();  // (the caller's, counted until forward returns)
  std::vector<std::string> seen;
  auto got = s.run_backward(*state, {{y, dy}}, {}, [&](const std::string& name, const Tensor& g) {
    seen.push_back(name);
    if (name != "w") return;
    EXPECT_EQ(std::memcmp(g.raw(), want.at("w").raw(), g.nbytes()), 0);
    std::fill(held.data<float>(), held.data<float>() + held.numel(), 99.0f);  // the update, in place
  });
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_EQ(got.count("w"), 0u);  // applied: freed, not returned
  EXPECT_EQ(std::memcmp(got.at("x").raw(), want.at("x").raw(), got.at("x").nbytes()), 0);
  EXPECT_EQ(alloc.stats().peak_allocated - before, s.predict_memory({{"batch", 5}}).peak);
}
