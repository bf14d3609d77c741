#include "test_graphs.h"

#include <onnx/onnx_pb.h>

#include "ir/onnx_io.h"
#include "kernels/run_node.h"
#include "ops/bind.h"

namespace onnxtrain::test_graphs {

ir::Value* add_input(ir::Graph& g, const std::string& name, DType t, Shape shape) {
  ir::Value* v = g.add_value(name);
  v->dtype = t;
  v->shape = std::move(shape);
  v->has_shape = true;
  g.inputs.push_back(v);
  return v;
}

ir::Value* add_weight(ir::Graph& g, const std::string& name, std::vector<int64_t> dims) {
  ir::Value* v = g.add_value(name);
  Tensor t(DType::kFloat32, dims);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = 0.01f * float(i % 17) - 0.08f;
  v->initializer = t;
  v->dtype = DType::kFloat32;
  v->shape = const_shape(dims);
  v->has_shape = true;
  g.initializers.push_back(v);
  return v;
}

ir::Value* add_scalar(ir::Graph& g, const std::string& name, float value) {
  ir::Value* v = g.add_value(name);
  Tensor t(DType::kFloat32, {});
  t.data<float>()[0] = value;
  v->initializer = t;
  v->dtype = DType::kFloat32;
  v->has_shape = true;
  g.initializers.push_back(v);
  return v;
}

ir::Value* add_op(ir::Graph& g, const std::string& op, std::vector<ir::Value*> inputs, ir::Attributes attrs) {
  ir::Value* out = g.add_value("");
  ir::Node* n = g.add_node(op, inputs, {out}, std::move(attrs));
  n->opset = 20;
  return out;
}

std::unique_ptr<ir::Graph> viewed_weight_graph() {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 20;
  ir::Value* x = add_input(*g, "x", DType::kFloat32, {Dim::symbol("batch"), Dim(8)});
  ir::Value* w = add_input(*g, "w", DType::kFloat32, {Dim(32)});
  ir::Value* shape = g->add_value("shape");
  Tensor dims(DType::kInt64, {2});
  dims.data<int64_t>()[0] = 8, dims.data<int64_t>()[1] = 4;
  shape->initializer = dims;
  shape->dtype = DType::kInt64;
  shape->shape = const_shape({2});
  shape->has_shape = true;
  g->initializers.push_back(shape);
  g->outputs.push_back(add_op(*g, "MatMul", {x, add_op(*g, "Reshape", {w, shape})}));
  return g;
}

std::unique_ptr<ir::Graph> mlp_graph() {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 20;
  ir::Value* x = add_input(*g, "x", DType::kFloat32, {Dim::symbol("batch"), Dim(8)});
  ir::Value* h = add_op(*g, "MatMul", {x, add_weight(*g, "w1", {8, 32})});
  h = add_op(*g, "Add", {h, add_weight(*g, "b1", {32})});
  h = add_op(*g, "Relu", {h});
  h = add_op(*g, "MatMul", {h, add_weight(*g, "w2", {32, 4})});
  g->outputs.push_back(add_op(*g, "Softmax", {h}, {{"axis", int64_t(-1)}}));
  return g;
}

Tensor pattern_tensor(std::vector<int64_t> dims) {
  Tensor t(DType::kFloat32, dims);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = float((i * 7) % 13) / 13.0f - 0.5f;
  return t;
}

// mlp_with_loss's graph, its parameters graph inputs or (`held`) initializers.
static std::unique_ptr<ir::Graph> mlp_loss_graph(bool held) {
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 20;
  Dim batch = Dim::symbol("batch");
  ir::Value* x = add_input(*g, "x", DType::kFloat32, {batch, Dim(8)});
  ir::Value* t = add_input(*g, "t", DType::kFloat32, {batch, Dim(4)});
  auto param = [&](const std::string& name, std::vector<int64_t> dims) {
    return held ? add_weight(*g, name, dims) : add_input(*g, name, DType::kFloat32, const_shape(dims));
  };
  ir::Value *w1 = param("w1", {8, 16}), *b1 = param("b1", {16}), *w2 = param("w2", {16, 4});
  ir::Value* h = add_op(*g, "Relu", {add_op(*g, "Add", {add_op(*g, "MatMul", {x, w1}), b1})});
  ir::Value* d = add_op(*g, "Sub", {add_op(*g, "MatMul", {h, w2}), t});
  ir::Value* loss = g->add_value("loss");
  g->add_node("ReduceMean", {add_op(*g, "Mul", {d, d})}, {loss}, {{"keepdims", int64_t(0)}})->opset = 20;
  g->outputs.push_back(loss);
  return g;
}

std::unique_ptr<ir::Graph> mlp_with_loss() { return mlp_loss_graph(false); }

std::string mlp_model_bytes() {
  onnx::ModelProto proto;
  ir::export_model(*mlp_loss_graph(true), &proto);
  return proto.SerializeAsString();
}

std::vector<Tensor> run_onnxtrain_node(const std::string& op, const std::vector<Tensor>& inputs,
                                       const std::vector<bool>& wanted, ir::Attributes attrs) {
  ir::Graph g;
  g.opsets[""] = 20;
  g.opsets["com.onnxtrain"] = 1;
  std::vector<ir::Value*> in, out;
  for (size_t i = 0; i < inputs.size(); ++i)
    in.push_back(inputs[i].defined()
                     ? add_input(g, "x" + std::to_string(i), inputs[i].dtype(), const_shape(inputs[i].dims()))
                     : nullptr);
  for (size_t i = 0; i < wanted.size(); ++i) out.push_back(wanted[i] ? g.add_value("y" + std::to_string(i)) : nullptr);
  ir::Node* n = g.add_node(op, in, out, std::move(attrs));
  n->domain = "com.onnxtrain";
  n->opset = 1;
  ops::bind_graph(g);
  std::vector<const Tensor*> ptrs;
  for (auto& t : inputs) ptrs.push_back(t.defined() ? &t : nullptr);
  return kernels::run_node(*n, ptrs);
}

}  // namespace onnxtrain::test_graphs
