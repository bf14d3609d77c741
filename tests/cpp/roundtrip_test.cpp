#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include "ir/onnx_io.h"
#include "onnxtrain/session.h"
#include "runtime/session_impl.h"
#include "test_graphs.h"

using namespace onnxtrain;

TEST(OnnxIo, ExportedModelReloadsWithSymbolicInputsAndSameResults) {
  onnx::ModelProto m;
  ir::export_model(*test_graphs::mlp_graph(), &m);
  EXPECT_EQ(m.graph().input(0).type().tensor_type().shape().dim(0).dim_param(), "batch");
  Session a = inference_session(test_graphs::mlp_graph());
  Session b = Session::from_bytes(m.SerializeAsString());
  Tensor x = test_graphs::pattern_tensor({3, 8});
  Tensor ya = a.run({{"x", x}}).begin()->second, yb = b.run({{"x", x}}).begin()->second;
  ASSERT_EQ(ya.dims(), yb.dims());
  for (int64_t i = 0; i < ya.numel(); ++i) EXPECT_EQ(ya.data<float>()[i], yb.data<float>()[i]);
}
