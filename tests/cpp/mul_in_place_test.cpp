// A Mul written in its operand's place by a factor of exactly 1 leaves the operand as it is (the host's kernel
// writes nothing: x * 1 is x); by any other factor, or by a tensor of factors, it multiplies as ever.
#include <gtest/gtest.h>

#include "onnxtrain/session.h"
#include "runtime/session_impl.h"
#include "test_graphs.h"

namespace onnxtrain {
namespace {

// y = (a + b) * f: the Mul in the place of the Add's output, which dies there.
Session scaled_sum(std::vector<int64_t> f_dims) {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 20;
  ir::Value* a = test_graphs::add_input(*g, "a", DType::kFloat32, const_shape({3, 5}));
  ir::Value* b = test_graphs::add_input(*g, "b", DType::kFloat32, const_shape({3, 5}));
  ir::Value* f = test_graphs::add_input(*g, "f", DType::kFloat32, const_shape(f_dims));
  ir::Value* y = test_graphs::add_op(*g, "Mul", {test_graphs::add_op(*g, "Add", {a, b}), f});
  y->name = "y";
  g->outputs.push_back(y);
  return inference_session(std::move(g));
}

TEST(MulInPlace, ByOneLeavesTheOperandAndByAnythingElseMultiplies) {
  const Tensor a = test_graphs::pattern_tensor({3, 5}), b = test_graphs::pattern_tensor({3, 5});
  for (std::vector<int64_t> f_dims : {std::vector<int64_t>{}, {1, 1}, {3, 5}}) {
    Session s = scaled_sum(f_dims);
    ASSERT_NE(s.impl().exe.plan.str().find("in place of"), std::string::npos) << s.impl().exe.plan.str();
    for (float factor : {1.f, 0.5f, -2.f, 0.f}) {
      Tensor f(DType::kFloat32, f_dims);
      for (int64_t i = 0; i < f.numel(); ++i) f.data<float>()[i] = i == 1 ? 3.f : factor;  // (a tensor: not all one)
      const Tensor y = s.run({{"a", a}, {"b", b}, {"f", f}}).at("y");
      for (int64_t i = 0; i < 15; ++i)
        ASSERT_EQ(y.data<float>()[i], (a.data<float>()[i] + b.data<float>()[i]) * f.data<float>()[i % f.numel()])
            << "factor " << factor << " of " << f.numel() << ", element " << i;
    }
  }
}

}  // namespace
}  // namespace onnxtrain
