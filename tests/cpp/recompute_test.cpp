// The recompute rewrite on training graphs built in code.
#include "memory/recompute.h"

#include <gtest/gtest.h>

#include "onnxtrain/session.h"
#include "runtime/session_impl.h"
#include "test_graphs.h"

using namespace onnxtrain;
using test_graphs::add_input;
using test_graphs::add_op;
using test_graphs::add_weight;

namespace {

// loss = sum(MatMul(Gelu(MatMul(x, w1)), w2)): Gelu's output is stashed for w2's gradient.
std::unique_ptr<ir::Graph> gelu_mlp() {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 20;
  ir::Value* x = add_input(*g, "x", DType::kFloat32, {Dim::symbol("batch"), Dim(8)});
  ir::Value* w1 = add_input(*g, "w1", DType::kFloat32, {Dim(8), Dim(16)});
  ir::Value* w2 = add_input(*g, "w2", DType::kFloat32, {Dim(16), Dim(4)});
  ir::Value* h = add_op(*g, "Gelu", {add_op(*g, "MatMul", {x, w1})});
  ir::Value* loss = add_op(*g, "ReduceSum", {add_op(*g, "MatMul", {h, w2})}, {{"keepdims", int64_t(0)}});
  g->outputs.push_back(loss);
  return g;
}

std::map<std::string, Tensor> grads(Session& s) {
  Tensor w1 = test_graphs::pattern_tensor({8, 16}), w2 = test_graphs::pattern_tensor({16, 4});
  auto [out, state] = s.run_forward({{"x", test_graphs::pattern_tensor({5, 8})}, {"w1", w1}, {"w2", w2}});
  return s.run_backward(*state);
}

}  // namespace

TEST(Recompute, GeluIsRecomputedWithItsGradientAndItsReaderRewired) {
  auto make = [](const std::string& config) {
    SessionOptions o;
    o.memory_config = config;
    auto g = gelu_mlp();
    std::string loss = g->outputs[0]->name;
    return training_session(std::move(g), TrainingSpec{{"w1", "w2"}, loss}, o);
  };
  Session plain = make(""), planned = make("Gelu+:1:-1");
  // The clone and the gradient, which reads the same MatMul output, became one GeluAndGrad.
  const ir::Node* clone = nullptr;
  size_t backward_gelus = 0;
  for (auto& n : planned.impl().graph().nodes()) {
    if (n->op_type == "GeluAndGrad" && n->backward) clone = n.get();
    backward_gelus += n->backward && (n->op_type == "Gelu" || n->op_type == "GeluGrad");
  }
  ASSERT_NE(clone, nullptr);
  EXPECT_EQ(backward_gelus, 0u);
  EXPECT_EQ(clone->inputs[1]->producer->op_type, "MatMul");  // reads the stashed MatMul output
  EXPECT_FALSE(clone->inputs[1]->producer->backward);
  EXPECT_TRUE(clone->inputs[0]->producer->backward);  // and the gradient of Gelu's output
  EXPECT_FALSE(clone->outputs[0]->consumers.empty());
  ASSERT_FALSE(clone->outputs[1]->consumers.empty());  // the recomputed Gelu output
  for (const ir::Node* c : clone->outputs[1]->consumers) EXPECT_TRUE(c->backward);
  size_t forward_gelu_backward_readers = 0;
  for (auto& n : planned.impl().graph().nodes())
    if (n->op_type == "Gelu" && !n->backward)
      for (const ir::Node* c : n->outputs[0]->consumers) forward_gelu_backward_readers += c->backward;
  EXPECT_EQ(forward_gelu_backward_readers, 0u);
  auto a = grads(plain), b = grads(planned);
  for (auto& [name, t] : a)
    for (int64_t i = 0; i < t.numel(); ++i) EXPECT_EQ(t.data<float>()[i], b.at(name).data<float>()[i]) << name;
  EXPECT_EQ(planned.impl().exe.report.clusters.size(), plain.impl().exe.report.clusters.size());
}

TEST(Recompute, TheNodeCapBoundsCandidates) {
  // Gelu(MatMul(x, w1) + b): the Add output is stashed for Gelu's gradient; recomputing it takes MatMul+Add.
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 20;
  ir::Value* x = add_input(*g, "x", DType::kFloat32, {Dim::symbol("batch"), Dim(8)});
  ir::Value* w1 = add_input(*g, "w1", DType::kFloat32, {Dim(8), Dim(16)});
  ir::Value* b = add_input(*g, "b", DType::kFloat32, {Dim(16)});
  ir::Value* h = add_op(*g, "Gelu", {add_op(*g, "Add", {add_op(*g, "MatMul", {x, w1}), b})});
  ir::Value* loss = add_op(*g, "ReduceSum", {h}, {{"keepdims", int64_t(0)}});
  g->outputs.push_back(loss);
  Session s = training_session(std::move(g), TrainingSpec{{"w1", "b"}, loss->name});
  auto clusters = [&](size_t cap) {
    std::vector<std::string> r;
    for (auto& c : memory::find_candidates(s.impl().graph(), cap)) r.push_back(c.cluster);
    return r;
  };
  auto wide = clusters(12), narrow = clusters(1);
  EXPECT_NE(std::find(wide.begin(), wide.end(), "MatMul+Add+"), wide.end());
  EXPECT_EQ(std::find(narrow.begin(), narrow.end(), "MatMul+Add+"), narrow.end());
  for (auto& c : memory::find_candidates(s.impl().graph(), 1)) EXPECT_EQ(c.nodes.size(), 1u);
}

TEST(Recompute, ACompromiseStashesTheHalfPrecisionInputOfAnUpCast) {
  // loss = sum(Cast<float32>(Cast<float16>(CumSum(x))) * w): CumSum is not recomputable, so the stashed float32
  // Cast output has no plain plan; the compromise recomputes the up-cast from its float16 input, kept instead. A
  // lone up-cast takes it at every level unless a config entry names its cluster ("Cast+:0:0" keeps it stashed).
  auto make = [](const std::string& config) {
    auto g = std::make_unique<ir::Graph>();
    g->opsets[""] = 20;
    ir::Value* x = add_input(*g, "x", DType::kFloat32, {Dim::symbol("batch"), Dim(8)});
    ir::Value* w = add_input(*g, "w", DType::kFloat32, {Dim(8)});
    ir::Value* axis = g->add_value("axis");
    Tensor a(DType::kInt64, {});
    a.data<int64_t>()[0] = 0;
    axis->initializer = a;
    axis->dtype = DType::kInt64;
    axis->has_shape = true;
    g->initializers.push_back(axis);
    ir::Value* half = add_op(*g, "Cast", {add_op(*g, "CumSum", {x, axis})}, {{"to", int64_t(DType::kFloat16)}});
    ir::Value* wide = add_op(*g, "Cast", {half}, {{"to", int64_t(DType::kFloat32)}});
    ir::Value* loss = add_op(*g, "ReduceSum", {add_op(*g, "Mul", {wide, w})}, {{"keepdims", int64_t(0)}});
    g->outputs.push_back(loss);
    SessionOptions o;
    o.memory_config = config;
    return training_session(std::move(g), TrainingSpec{{"w"}, loss->name}, o);
  };
  Session plain = make("Cast+:0:0"), strategy1 = make("Cast+:1:-1"), compromised = make("Cast+:2:-1"),
          by_default = make("");
  auto candidates = memory::find_candidates(plain.impl().graph());
  auto c = std::find_if(candidates.begin(), candidates.end(), [](auto& x) { return x.compromise; });
  ASSERT_NE(c, candidates.end());
  ASSERT_EQ(c->kept.size(), 1u);  // the float16 input of the up-cast, stashed instead
  EXPECT_EQ(c->kept[0]->dtype, DType::kFloat16);
  const memory::ClusterReport* row = nullptr;
  for (auto& r : compromised.impl().exe.report.clusters)
    if (r.cluster == "Cast+") row = &r;
  ASSERT_NE(row, nullptr);
  EXPECT_TRUE(row->compromise);
  EXPECT_EQ(row->config(), "Cast+:2:-1");
  EXPECT_EQ(row->bytes, Dim::symbol("batch") * Dim(16));  // 32 bytes a row stashed in float32, 16 in float16
  EXPECT_EQ(row->applied, 1);
  for (auto& r : strategy1.impl().exe.report.clusters) EXPECT_EQ(r.applied, 0) << r.cluster;  // strategy 1: plain only
  auto step = [](Session& s, int64_t* stash) {
    auto [out, state] =
        s.run_forward({{"x", test_graphs::pattern_tensor({5, 8})}, {"w", test_graphs::pattern_tensor({8})}});
    *stash = state->stash_bytes();
    return s.run_backward(*state).at("w");
  };
  int64_t full = 0, kept = 0;
  Tensor a = step(plain, &full), b = step(compromised, &kept);
  EXPECT_EQ(full - kept, 5 * 8 * 2);  // half of the float32 value's bytes: its float16 input is kept instead
  for (int64_t i = 0; i < a.numel(); ++i) EXPECT_EQ(a.data<float>()[i], b.data<float>()[i]);
  int64_t by_default_kept = 0;
  step(by_default, &by_default_kept);
  EXPECT_EQ(by_default_kept, kept);
}

TEST(Recompute, CountNTakesTheFirstNInForwardOrderAndTheLastDuplicateWins) {
  // Three blocks h = Gelu(MatMul(h, w_i)), each Gelu output stashed for the next MatMul's weight gradient.
  auto make = [](const std::string& config) {
    auto g = std::make_unique<ir::Graph>();
    g->opsets[""] = 20;
    ir::Value* h = add_input(*g, "x", DType::kFloat32, {Dim::symbol("batch"), Dim(8)});
    std::vector<std::string> wrt;
    for (int i = 0; i < 4; ++i) {
      wrt.push_back("w" + std::to_string(i));
      h = add_op(*g, "MatMul", {h, add_input(*g, wrt.back(), DType::kFloat32, {Dim(8), Dim(8)})});
      if (i < 3) h = add_op(*g, "Gelu", {h});
    }
    ir::Value* loss = add_op(*g, "ReduceSum", {h}, {{"keepdims", int64_t(0)}});
    g->outputs.push_back(loss);
    SessionOptions o;
    o.memory_config = config;
    return training_session(std::move(g), TrainingSpec{wrt, loss->name}, o);
  };
  // Which forward Gelu nodes (in forward order) lost their backward readers to a clone.
  auto recomputed = [](const Session& s) {
    std::vector<bool> r;
    for (auto& n : s.impl().graph().nodes())
      if (n->op_type == "Gelu" && !n->backward) {
        bool read = false;
        for (const ir::Node* c : n->outputs[0]->consumers) read = read || c->backward;
        r.push_back(!read);
      }
    return r;
  };
  EXPECT_EQ(recomputed(make("Gelu+:1:2")), (std::vector<bool>{true, true, false}));
  EXPECT_EQ(recomputed(make("Gelu+:1:-1")), (std::vector<bool>{true, true, true}));
  EXPECT_EQ(recomputed(make("Gelu+:1:-1,Gelu+:0:0")), (std::vector<bool>{false, false, false}));
  EXPECT_EQ(recomputed(make("Gelu+:0:0, Gelu+:1:1")), (std::vector<bool>{true, false, false}));
  Session more = make("Gelu+:1:5");
  const auto& rows = more.impl().exe.report.clusters;
  auto it = std::find_if(rows.begin(), rows.end(), [](auto& r) { return r.cluster == "Gelu+"; });
  ASSERT_NE(it, rows.end());
  const memory::ClusterReport& row = *it;
  EXPECT_EQ(row.frequency, 3);
  EXPECT_EQ(row.applied, 3);
  EXPECT_EQ(row.requested, 5);  // asked for more than exist
}
