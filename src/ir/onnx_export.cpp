// ir::Graph -> ModelProto. Symbolic dims become dim_param, constants dim_value.
#include <onnx/onnx_pb.h>

#include <map>

#include "ir/onnx_io.h"

namespace onnxtrain::ir {

static void write_type(const Value* v, onnx::ValueInfoProto* vi) {
  vi->set_name(v->name);
  auto* tt = vi->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(int32_t(v->dtype));
  if (!v->has_shape) return;
  auto* sh = tt->mutable_shape();
  for (auto& d : v->shape) {
    auto* dp = sh->add_dim();
    if (d.is_const()) dp->set_dim_value(d.value());
    else dp->set_dim_param(d.str());
  }
}

static void write_attribute(const std::string& name, const Attribute& a, onnx::AttributeProto* ap) {
  ap->set_name(name);
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, int64_t>) ap->set_type(onnx::AttributeProto::INT), ap->set_i(v);
        else if constexpr (std::is_same_v<T, float>) ap->set_type(onnx::AttributeProto::FLOAT), ap->set_f(v);
        else if constexpr (std::is_same_v<T, std::string>) ap->set_type(onnx::AttributeProto::STRING), ap->set_s(v);
        else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          ap->set_type(onnx::AttributeProto::INTS);
          for (auto x : v) ap->add_ints(x);
        } else if constexpr (std::is_same_v<T, std::vector<float>>) {
          ap->set_type(onnx::AttributeProto::FLOATS);
          for (auto x : v) ap->add_floats(x);
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          ap->set_type(onnx::AttributeProto::STRINGS);
          for (auto& x : v) ap->add_strings(x);
        } else {
          ap->set_type(onnx::AttributeProto::TENSOR);
          tensor_to_proto(v, "", ap->mutable_t());
        }
      },
      a);
}

void export_model(const Graph& g, onnx::ModelProto* model) {
  model->set_ir_version(g.ir_version);
  model->set_producer_name("onnxtrain");
  std::map<std::string, int64_t> opsets = g.opsets;
  for (auto& n : g.nodes()) opsets.emplace(n->domain, n->opset);  // onnxtrain's own ops (com.onnxtrain) too
  for (auto& [domain, version] : opsets) {
    auto* os = model->add_opset_import();
    os->set_domain(domain);
    os->set_version(version);
  }
  auto* gp = model->mutable_graph();
  gp->set_name(g.name.empty() ? "onnxtrain" : g.name);
  for (Value* v : g.initializers) tensor_to_proto(*v->initializer, v->name, gp->add_initializer());
  for (Value* v : g.inputs) write_type(v, gp->add_input());
  for (Value* v : g.outputs) write_type(v, gp->add_output());
  for (auto& n : g.nodes()) {
    auto* np = gp->add_node();
    np->set_name(n->name);
    np->set_op_type(n->op_type);
    np->set_domain(n->domain);
    for (Value* v : n->inputs) np->add_input(v ? v->name : "");
    for (Value* v : n->outputs) np->add_output(v ? v->name : "");
    for (auto& [k, a] : n->attrs) write_attribute(k, a, np->add_attribute());
    for (Value* v : n->outputs)
      if (v && v->has_shape && v->dtype != DType::kUndefined) write_type(v, gp->add_value_info());
  }
}

void save_model_file(const Graph& g, const std::string& path) {
  onnx::ModelProto m;
  export_model(g, &m);
  write_file_atomic(path, m.SerializeAsString());
}

}  // namespace onnxtrain::ir
