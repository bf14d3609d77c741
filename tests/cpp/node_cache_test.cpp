// kernels::NodeCache: a node run again on inputs of the same dtypes and dims (and, for the inputs it reads on the
// host, the same values) reuses what its first run worked out; anything else works it out again.
#include <gtest/gtest.h>

#include "kernels/run_node.h"
#include "ops/bind.h"
#include "test_graphs.h"

namespace onnxtrain {
namespace {

struct Reshape {
  ir::Graph g;
  ir::Node* node = nullptr;
  Reshape() {
    ir::Value* x = test_graphs::add_input(g, "x", DType::kFloat32, {Dim::symbol("n")});
    ir::Value* shape = test_graphs::add_input(g, "shape", DType::kInt64, {Dim(2)});
    ir::Value* y = g.add_value("y");
    node = g.add_node("Reshape", {x, shape}, {y});
    ops::bind_graph(g);
  }
  std::vector<int64_t> run(kernels::NodeCache& cache, int64_t rows, int64_t cols) {
    Tensor x = test_graphs::pattern_tensor({rows * cols}), shape(DType::kInt64, {2});
    shape.data<int64_t>()[0] = rows;
    shape.data<int64_t>()[1] = cols;
    kernels::RunArgs args;
    args.cache = &cache;
    Tensor y = kernels::run_node(*node, {&x, &shape}, args).at(0);
    EXPECT_EQ(std::vector<float>(y.data<float>(), y.data<float>() + y.numel()),
              std::vector<float>(x.data<float>(), x.data<float>() + x.numel()));
    return y.dims();
  }
};

TEST(NodeCache, TheSameInputsReuseWhatTheFirstRunWorkedOut) {
  Reshape r;
  kernels::NodeCache cache;
  EXPECT_EQ(r.run(cache, 2, 6), (std::vector<int64_t>{2, 6}));
  const ops::InferCtx* first = cache.shapes.get();
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(r.run(cache, 2, 6), (std::vector<int64_t>{2, 6}));
  EXPECT_EQ(cache.shapes.get(), first);  // not inferred again
}

TEST(NodeCache, OtherDimsOrOtherHostValuesAreWorkedOutAgain) {
  Reshape r;
  kernels::NodeCache cache;
  r.run(cache, 2, 6);
  // Input dims the same (12 elements, a shape of 2), the shape's values not: the key holds the values it reads.
  EXPECT_EQ(r.run(cache, 3, 4), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(r.run(cache, 4, 5), (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(r.run(cache, 2, 6), (std::vector<int64_t>{2, 6}));
}

}  // namespace
}  // namespace onnxtrain
