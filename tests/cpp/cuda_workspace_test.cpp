// cuBLASLt's workspace as a product node's scratch (kernels/cuda/workspace.h), on the host: what a MatMul on a CUDA
// device declares (so the allocation plan and the predicted peak count it) at small, middling and large outputs of
// a symbolic batch, and where in the scratch a kernel finds it (aligned to 256 bytes, inside what was declared).
#ifdef ONNXTRAIN_WITH_CUDA
#include <gtest/gtest.h>

#include "kernels/cuda/workspace.h"
#include "kernels/shape_inference.h"
#include "ops/bind.h"
#include "test_graphs.h"

namespace onnxtrain::kernels::cuda {
namespace {

constexpr int64_t kMiB = int64_t(1) << 20;

TEST(CudaWorkspace, AProductDeclaresCublasLtsWorkspaceAsScratch) {
  ir::Graph g;
  g.opsets[""] = 20;
  ir::Value* x = test_graphs::add_input(g, "x", DType::kBFloat16, {Dim::symbol("batch"), Dim(64), Dim(32)});
  ir::Value* w = test_graphs::add_input(g, "w", DType::kBFloat16, {Dim(32), Dim(48)});
  g.outputs.push_back(test_graphs::add_op(g, "MatMul", {x, w}));
  ops::bind_graph(g);
  kernels::infer_shapes(g);
  const Dim bytes = scratch_bytes(cuda_device(0), *g.nodes().front());
  ASSERT_FALSE(bytes.is_const()) << bytes.str();
  EXPECT_EQ(bytes.eval(Bindings{{"batch", 1}}), kMiB + 256);                // at least 1 MiB
  EXPECT_EQ(bytes.eval(Bindings{{"batch", 100}}), 16 * 100 * 64 * 48 + 256);  // four float32 copies of the output
  EXPECT_EQ(bytes.eval(Bindings{{"batch", 1000}}), 32 * kMiB + 256);         // Hopper's recommended 32 MiB at most
  EXPECT_EQ(scratch_bytes(kCpu, *g.nodes().front()), Dim(0));          // none on the host
}

TEST(CudaWorkspace, TheKernelFindsItAlignedInsideItsScratch) {
  ir::Graph g;
  g.opsets[""] = 20;
  test_graphs::add_op(g, "MatMul", {test_graphs::add_input(g, "a", DType::kFloat32, {Dim(2), Dim(2)}),
                                    test_graphs::add_input(g, "b", DType::kFloat32, {Dim(2), Dim(2)})});
  const size_t declared = size_t(kMiB + 256);
  std::vector<char> scratch(declared + 512);
  for (size_t shift : {size_t(0), size_t(64), size_t(192), size_t(255)}) {
    char* start = scratch.data() + (256 - reinterpret_cast<uintptr_t>(scratch.data()) % 256) % 256 + shift;
    KernelCtx c{*g.nodes().front(), {}, {}, 0, nullptr, nullptr, start, declared};
    const Workspace ws = workspace_in(c, 0, declared);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(ws.at) % 256, 0u) << shift;
    EXPECT_GE(static_cast<char*>(ws.at), start);
    EXPECT_LE(static_cast<char*>(ws.at) + ws.bytes, start + declared) << shift;
    EXPECT_EQ(ws.bytes, size_t(kMiB));
  }
}

}  // namespace
}  // namespace onnxtrain::kernels::cuda
#endif
