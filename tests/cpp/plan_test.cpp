#include <gtest/gtest.h>

#include "onnxtrain/session.h"
#include "runtime/session_impl.h"
#include "test_graphs.h"

using namespace onnxtrain;

TEST(AllocationPlan, PredictedPeakEqualsMeasuredPeak) {
  CachingAllocator alloc;
  SessionOptions opts;
  opts.allocator = &alloc;
  Session s = inference_session(test_graphs::mlp_graph(), opts);
  for (int64_t batch : {1, 7, 64}) {
    auto predicted = s.predicted_peak({{"batch", batch}});
    ASSERT_TRUE(predicted.has_value());
    alloc.reset_peaks();
    int64_t before = alloc.stats().allocated;
    auto out = s.run({{"x", test_graphs::pattern_tensor({batch, 8})}});
    EXPECT_EQ(alloc.stats().peak_allocated - before, *predicted) << "batch " << batch;
  }
}

TEST(AllocationPlan, ReusesDyingInputsInPlaceAndPrintsItself) {
  Session s = inference_session(test_graphs::mlp_graph());
  std::string plan = s.impl().exe.plan.str();
  EXPECT_NE(plan.find("in place of"), std::string::npos) << plan;  // Add and Relu reuse the MatMul output
  EXPECT_NE(plan.find("alloc"), std::string::npos);
  EXPECT_NE(plan.find("alloc v_0 (128*batch bytes)"), std::string::npos) << plan;  // sizes stay symbolic
}

TEST(AllocationPlan, InPlaceOffKeepsResultsIdentical) {
  SessionOptions off;
  off.allow_inplace = false;
  Session a = inference_session(test_graphs::mlp_graph());
  Session b = inference_session(test_graphs::mlp_graph(), off);
  Tensor x = test_graphs::pattern_tensor({5, 8});
  Tensor ya = a.run({{"x", x}}).begin()->second, yb = b.run({{"x", x}}).begin()->second;
  ASSERT_EQ(ya.dims(), yb.dims());
  for (int64_t i = 0; i < ya.numel(); ++i) EXPECT_EQ(ya.data<float>()[i], yb.data<float>()[i]);
  EXPECT_EQ(b.impl().exe.plan.str().find("in place of"), std::string::npos);
}
