// The scratch CUDA kernels declare (so that the allocation plan and the predicted peak count it), on the host:
// cuBLASLt's workspace as a product node's (kernels/cuda/workspace.h) at small, middling and large outputs of a
// symbolic batch, and where in the scratch a kernel finds it (aligned to 256 bytes, inside what was declared); a
// reduction's partial sums over chunks of rows, when it reduces leading dims; the fused head's padded classes; the
// attention's map of its mask's tiles.
#ifdef ONNXTRAIN_WITH_CUDA
#include <gtest/gtest.h>

#include "kernels/cuda/workspace.h"
#include "kernels/shape_inference.h"
#include "ops/bind.h"
#include "test_graphs.h"

namespace onnxtrain::kernels::cuda {
namespace {

constexpr int64_t kMiB = int64_t(1) << 20;

// A graph of one `op` on x (batch, 64, 48) of dtype t and `more` inputs, bound and shaped.
std::unique_ptr<ir::Graph> one_node(const std::string& op, DType t, std::vector<ir::Value*> (*more)(ir::Graph&)) {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 20;
  std::vector<ir::Value*> in{test_graphs::add_input(*g, "x", t, {Dim::symbol("batch"), Dim(64), Dim(48)})};
  for (ir::Value* v : more(*g)) in.push_back(v);
  g->outputs.push_back(test_graphs::add_op(*g, op, in, {{"keepdims", int64_t(0)}}));
  ops::bind_graph(*g);
  kernels::infer_shapes(*g);
  return g;
}

ir::Value* axes(ir::Graph& g, std::vector<int64_t> values) {
  ir::Value* v = g.add_value("axes");
  Tensor t(DType::kInt64, {int64_t(values.size())});
  for (size_t i = 0; i < values.size(); ++i) t.data<int64_t>()[i] = values[i];
  v->initializer = t;
  v->dtype = DType::kInt64;
  v->shape = const_shape({int64_t(values.size())});
  v->has_shape = true;
  g.initializers.push_back(v);
  return v;
}

TEST(CudaScratch, AProductDeclaresCublasLtsWorkspace) {
  auto g = one_node("MatMul", DType::kBFloat16, [](ir::Graph& g) {
    return std::vector<ir::Value*>{test_graphs::add_input(g, "w", DType::kBFloat16, {Dim(48), Dim(48)})};
  });
  const Dim bytes = scratch_bytes(cuda_device(0), *g->nodes().front());
  ASSERT_FALSE(bytes.is_const()) << bytes.str();
  EXPECT_EQ(bytes.eval(Bindings{{"batch", 1}}), kMiB + 256);                // at least 1 MiB
  EXPECT_EQ(bytes.eval(Bindings{{"batch", 100}}), 16 * 100 * 64 * 48 + 256);  // four float32 copies of the output
  EXPECT_EQ(bytes.eval(Bindings{{"batch", 1000}}), 32 * kMiB + 256);         // Hopper's recommended 32 MiB at most
  EXPECT_EQ(scratch_bytes(kCpu, *g->nodes().front()), Dim(0));         // none on the host
}

TEST(CudaScratch, AReductionOverLeadingDimsDeclaresItsPartialSums) {
  auto leading = one_node("ReduceSum", DType::kFloat32, [](ir::Graph& g) { return std::vector{axes(g, {0, 1})}; });
  EXPECT_EQ(scratch_bytes(cuda_device(0), *leading->nodes().front()), Dim(48 * 64 * 4));  // kRowChunks floats a column
  auto mean = one_node("ReduceMean", DType::kBFloat16, [](ir::Graph& g) { return std::vector{axes(g, {0})}; });
  EXPECT_EQ(scratch_bytes(cuda_device(0), *mean->nodes().front()), Dim(64 * 48 * 64 * 4));
  for (const char* op : {"ReduceSum", "ReduceMax"}) {  // a middle dim; an extreme: a block per output, no scratch
    auto other = one_node(op, DType::kFloat32, [](ir::Graph& g) { return std::vector{axes(g, {1})}; });
    EXPECT_EQ(scratch_bytes(cuda_device(0), *other->nodes().front()), Dim(0)) << op;
  }
}

TEST(CudaScratch, TheKernelFindsTheWorkspaceAlignedInsideItsScratch) {
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
  KernelCtx none{*g.nodes().front(), {}, {}, 0, nullptr, nullptr, nullptr, 0};  // a kernel run without scratch
  EXPECT_EQ(workspace_in(none, 0, 0).bytes, 0u);
}

// The fused head's scratch (com.onnxtrain.LinearCrossEntropy on 2048 rows of 64, bf16, its loss, dX, dW and logits
// asked for) at `classes` classes, dB too where `db`, with a bias B where `bias`.
int64_t head_scratch(int64_t classes, bool db, bool bias = false) {
  ir::Graph g;
  g.opsets[""] = 20;
  g.opsets["com.onnxtrain"] = 1;
  std::vector<ir::Value*> in{test_graphs::add_input(g, "x", DType::kBFloat16, {Dim::symbol("rows"), Dim(64)}),
                             test_graphs::add_input(g, "w", DType::kBFloat16, {Dim(classes), Dim(64)}),
                             bias ? test_graphs::add_input(g, "b", DType::kBFloat16, {Dim(classes)}) : nullptr,
                             test_graphs::add_input(g, "target", DType::kInt64, {Dim::symbol("rows")})};
  std::vector<ir::Value*> out;
  for (int i = 0; i < 6; ++i) out.push_back(i == 1 || (i == 4 && !db) ? nullptr : g.add_value("y" + std::to_string(i)));
  ir::Node* n = g.add_node("LinearCrossEntropy", in, out, {{"ignore_index", int64_t(-100)}});
  n->domain = "com.onnxtrain";
  n->opset = 1;
  ops::bind_graph(g);
  kernels::infer_shapes(g);
  return scratch_bytes(cuda_device(0), *n).eval(Bindings{{"rows", 2048}}).value();
}

// GPT-2's 50,257 classes are padded to 50,264 (a multiple of 8, for cuBLASLt's fast kernels): the scratch of 50,264
// classes (the dW sum's too), plus W's padded copy (a 64-byte span), and B's padded copy where there is a B;
// no padding, so no copies, where dB is asked for (its column sums read rows of the classes alone). The logits are
// cast from the padded scores straight into their output.
TEST(CudaScratch, TheFusedHeadPadsItsClassesToMultiplesOfEight) {
  auto span = [](int64_t bytes) { return (bytes + 63) / 64 * 64; };
  const int64_t padded = 50264;
  const int64_t copies = span(padded * 64 * 2);
  EXPECT_EQ(head_scratch(50257, false), head_scratch(padded, false) + copies);
  EXPECT_EQ(head_scratch(50257, false, true), head_scratch(50257, false) + span(padded * 2));
  EXPECT_EQ(head_scratch(padded, false, true), head_scratch(padded, false));
  EXPECT_GE(head_scratch(50257, false) - head_scratch(50257, true), copies);
  EXPECT_EQ(head_scratch(padded, true), head_scratch(padded, false));
}

// The head's scores are in its dtype (bf16, rounded as autocast's Linear writes them) and their gradient takes their
// place: 2,048 rows of 50,264 classes are one block, after cuBLASLt's workspace (32 MiB at most, aligned) and before
// the log-sum-exps (output 1 is not asked for), the totals and dW's float32 sum.
TEST(CudaScratch, TheFusedHeadsScoresAreInItsDtypeTheirGradientInTheirPlace) {
  auto span = [](int64_t bytes) { return (bytes + 63) / 64 * 64; };
  const int64_t classes = 50264, rows = 2048;
  EXPECT_EQ(head_scratch(classes, false), span(32 * kMiB + 256) + span(rows * classes * 2) + span(rows * 4) +
                                              span(4 * 8) + span(classes * 64 * 4));
}

// FlashAttention (forward, or its gradient) of batch x 12 heads, 150 rows by 144 keys of 64, dtype t, with a causal
// mask where `masked`: its scratch.
Dim attention_scratch(DType t, bool masked, bool grad) {
  ir::Graph g;
  g.opsets[""] = 20;
  g.opsets["com.onnxtrain"] = 1;
  const Dim b = Dim::symbol("batch");
  auto add = [&](const char* name, DType dt, Shape shape) { return test_graphs::add_input(g, name, dt, shape); };
  ir::Value *q = add("q", t, {b, Dim(12), Dim(150), Dim(64)}), *k = add("k", t, {b, Dim(12), Dim(144), Dim(64)});
  ir::Value* v = add("v", t, {b, Dim(12), Dim(144), Dim(64)});
  ir::Value* cond = masked ? add("cond", DType::kBool, {Dim(150), Dim(144)}) : nullptr;
  ir::Value* fill = masked ? add("fill", t, {}) : nullptr;
  std::vector<ir::Value*> in{q, k, v, nullptr, cond, fill}, out{g.add_value("y"), g.add_value("lse")};
  if (grad) {
    in.insert(in.begin(), add("dy", t, {b, Dim(12), Dim(150), Dim(64)}));
    in.insert(in.begin() + 4, {add("y", t, {b, Dim(12), Dim(150), Dim(64)}),
                               add("lse_in", DType::kFloat32, {b, Dim(12), Dim(150)})});
    out = {g.add_value("dq"), g.add_value("dk"), g.add_value("dv")};
  }
  ir::Node* n = g.add_node(grad ? "FlashAttentionGrad" : "FlashAttention", in, out, {});
  n->domain = "com.onnxtrain";
  n->opset = 1;
  ops::bind_graph(g);
  kernels::infer_shapes(g);
  return scratch_bytes(cuda_device(0), *n);
}

// The tiled kernels' map of a mask's tiles: a byte per 16 rows by 16 keys of every pair (10 x 9 tiles of each of
// batch x 12 pairs here, a row of 9 padded to 12) and a word after it, for 16-bit and float32 operands with a mask;
// after the backward's float per row and, for 16-bit operands, its float32 sums of dQ (a float per element of Q; the
// float32 kernels sum into dQ itself).
TEST(CudaScratch, AttentionDeclaresTheMapOfItsMasksTilesAndTheSumsOfDQ) {
  const Bindings at{{"batch", 2}};
  EXPECT_EQ(attention_scratch(DType::kBFloat16, true, false).eval(at), 2 * 12 * 10 * 12 + 4);
  EXPECT_EQ(attention_scratch(DType::kFloat32, true, false).eval(at), 2 * 12 * 10 * 12 + 4);
  EXPECT_EQ(attention_scratch(DType::kBFloat16, false, false).eval(at), 0);
  auto span = [](int64_t bytes) { return (bytes + 63) / 64 * 64; };
  const int64_t rows = 2 * 12 * 150 * 4, sums = 2 * 12 * 150 * 64 * 4;
  EXPECT_EQ(attention_scratch(DType::kFloat16, true, true).eval(at), span(rows) + span(sums) + 2 * 12 * 10 * 12 + 4);
  EXPECT_EQ(attention_scratch(DType::kFloat16, false, true).eval(at), span(rows) + sums);
  EXPECT_EQ(attention_scratch(DType::kFloat32, true, true).eval(at), span(rows) + 2 * 12 * 10 * 12 + 4);
  EXPECT_EQ(attention_scratch(DType::kFloat32, false, true).eval(at), rows);
}

}  // namespace
}  // namespace onnxtrain::kernels::cuda
#endif
