// ModelProto -> ir::Graph: validation, initializers, symbolic input dims, typed attributes.
#include <onnx/checker.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "ir/onnx_io.h"
#include "ir/onnx_schema.h"
#include "onnxtrain/error.h"

namespace onnxtrain::ir {

// The newest default-domain opset the linked ONNX checker knows.
constexpr int64_t kCheckerMaxOpset = 17;
constexpr int64_t kCheckerMaxIrVersion = 8;

static Attribute convert_attribute(const onnx::AttributeProto& a, const std::string& base_dir,
                                   const std::string& where) {
  switch (a.type()) {
    case onnx::AttributeProto::INT:
      return int64_t(a.i());
    case onnx::AttributeProto::FLOAT:
      return a.f();
    case onnx::AttributeProto::STRING:
      return a.s();
    case onnx::AttributeProto::INTS:
      return std::vector<int64_t>(a.ints().begin(), a.ints().end());
    case onnx::AttributeProto::FLOATS:
      return std::vector<float>(a.floats().begin(), a.floats().end());
    case onnx::AttributeProto::STRINGS:
      return std::vector<std::string>(a.strings().begin(), a.strings().end());
    case onnx::AttributeProto::TENSOR:
      return tensor_from_proto(a.t(), base_dir, where + " attribute '" + a.name() + "'");
    default:
      throw UnsupportedError(where + ": attribute '" + a.name() + "' has a kind onnxtrain does not support (" +
                             std::to_string(int(a.type())) + ")");
  }
}

static void set_type(Value* v, const onnx::TypeProto& type, bool is_graph_input) {
  if (!type.has_tensor_type()) return;
  const auto& tt = type.tensor_type();
  v->dtype = dtype_from_onnx(tt.elem_type());
  if (!tt.has_shape()) return;
  v->has_shape = true;
  v->shape.clear();
  for (int i = 0; i < tt.shape().dim_size(); ++i) {
    const auto& d = tt.shape().dim(i);
    if (d.has_dim_value())
      v->shape.push_back(Dim(d.dim_value()));
    else if (d.has_dim_param() && !d.dim_param().empty())
      v->shape.push_back(Dim::symbol(d.dim_param()));
    else if (is_graph_input)
      v->shape.push_back(Dim::symbol(v->name + "_dim" + std::to_string(i)));
    else
      v->has_shape = false;  // inference will fill it
  }
}

static void validate(const onnx::ModelProto& model) {
  bool checker_knows = model.ir_version() <= kCheckerMaxIrVersion;
  for (auto& os : model.opset_import())
    if ((os.domain().empty() || os.domain() == "ai.onnx") && os.version() > kCheckerMaxOpset) checker_knows = false;
  if (!model.has_graph()) throw ModelError("model: no graph");
  if (!checker_knows) return;
  try {
    onnx::checker::check_model(model);
  } catch (const std::exception& e) {
    throw ModelError(std::string("model failed ONNX's checker: ") + e.what());
  }
}

// PRelu before opset 7 multiplied by a slope of C values along the channels, axis 1 (opset 7 made the slope
// broadcast as numpy does, from the last axis): such a slope, read by a PRelu of X of known rank r > 2, becomes a
// Reshape of it to (C, 1, ..., 1), r - 2 ones.
static Value* channel_slope(Graph& g, Value* x, Value* slope, int64_t opset) {
  if (!x || !slope || !x->has_shape || !slope->has_shape || slope->shape.size() != 1 || x->shape.size() <= 2 ||
      slope->shape[0] == Dim(1))
    return slope;
  Value* shape = g.add_value(g.unique_name(slope->name + "_per_channel_shape"));
  Tensor dims(DType::kInt64, {int64_t(x->shape.size()) - 1});
  std::fill(dims.data<int64_t>(), dims.data<int64_t>() + dims.numel(), int64_t(1));
  dims.data<int64_t>()[0] = -1;
  shape->initializer = dims;
  shape->dtype = DType::kInt64;
  shape->shape = const_shape(dims.dims());
  shape->has_shape = true;
  g.initializers.push_back(shape);
  Value* reshaped = g.add_value(g.unique_name(slope->name + "_per_channel"));
  Node* n = g.add_node("Reshape", {slope, shape}, {reshaped}, {}, g.unique_name("Reshape_channel_slope"));
  n->opset = opset;
  return reshaped;
}

std::unique_ptr<Graph> import_model(const onnx::ModelProto& model, const std::string& base_dir) {
  validate(model);
  auto g = std::make_unique<Graph>();
  const auto& gp = model.graph();
  g->name = gp.name();
  g->ir_version = model.ir_version();
  g->producer_name = model.producer_name();
  for (auto& os : model.opset_import()) g->opsets[os.domain() == "ai.onnx" ? "" : os.domain()] = os.version();
  for (auto& init : gp.initializer()) {
    Value* v = g->add_value(init.name());
    v->initializer = tensor_from_proto(init, base_dir, "initializer");
    v->dtype = v->initializer->dtype();
    v->shape = const_shape(v->initializer->dims());
    v->has_shape = true;
    g->initializers.push_back(v);
  }
  for (auto& in : gp.input()) {
    if (g->find(in.name())) continue;  // an initializer listed as input (older IR): a constant
    Value* v = g->add_value(in.name());
    set_type(v, in.type(), true);
    if (v->dtype == DType::kUndefined)
      throw UnsupportedError("graph input '" + in.name() + "': element type " +
                             std::to_string(in.type().tensor_type().elem_type()) + " is not supported");
    g->inputs.push_back(v);
  }
  auto value_for = [&](const std::string& name, const std::string& where) -> Value* {
    if (name.empty()) return nullptr;
    Value* v = g->find(name);
    if (!v)
      throw ModelError(where + ": input '" + name + "' is not produced by any earlier node, input or initializer");
    return v;
  };
  int index = 0;
  for (auto& np : gp.node()) {
    std::string name = np.name().empty() ? np.op_type() + "_" + std::to_string(index) : np.name();
    std::string where = "node '" + name + "' (" + np.op_type() + ")";
    ++index;
    std::vector<Value*> ins, outs;
    for (auto& i : np.input()) ins.push_back(value_for(i, where));
    for (auto& o : np.output()) {
      if (o.empty()) {
        outs.push_back(nullptr);
        continue;
      }
      if (g->find(o)) throw ModelError(where + ": output '" + o + "' is produced twice");
      outs.push_back(g->add_value(o));
    }
    Attributes attrs;
    for (auto& a : np.attribute()) attrs[a.name()] = convert_attribute(a, base_dir, where);
    const bool default_domain = np.domain().empty() || np.domain() == "ai.onnx";
    const auto onnx_opset = g->opsets.find("");
    if (default_domain && np.op_type() == "PRelu" && onnx_opset != g->opsets.end() && onnx_opset->second < 7 &&
        ins.size() == 2)
      ins[1] = channel_slope(*g, ins[0], ins[1], onnx_opset->second);
    Node* n = g->add_node(np.op_type(), ins, outs, std::move(attrs), name);
    n->domain = np.domain() == "ai.onnx" ? "" : np.domain();
    auto it = g->opsets.find(n->domain);
    n->opset = it == g->opsets.end() ? 0 : it->second;
    if (n->domain.empty() && n->opset <= 0)
      throw ModelError(where + ": the model imports no opset of the ONNX domain (opset_import)");
    check_arity(*n);
  }
  for (auto& out : gp.output()) {
    Value* v = g->find(out.name());
    if (!v) throw ModelError("graph output '" + out.name() + "' is not produced by any node");
    if (std::find(g->outputs.begin(), g->outputs.end(), v) != g->outputs.end())
      throw ModelError("graph output '" + out.name() + "' is listed twice");
    g->outputs.push_back(v);
  }
  return g;
}

std::unique_ptr<Graph> load_model_bytes(const std::string& bytes) {
  onnx::ModelProto model;
  if (bytes.empty()) throw ModelError("model: the bytes are empty");
  if (!model.ParseFromString(bytes)) throw ModelError("model: not a valid ONNX ModelProto (truncated or corrupt)");
  return import_model(model, "");
}

std::unique_ptr<Graph> load_model_file(const std::string& path) {
  if (!std::filesystem::exists(path)) throw IoError("model file '" + path + "' does not exist");
  std::ifstream f(path, std::ios::binary);
  if (!f) throw IoError("model file '" + path + "' cannot be opened");
  std::ostringstream ss;
  ss << f.rdbuf();
  std::string bytes = ss.str();
  onnx::ModelProto model;
  if (bytes.empty()) throw ModelError("model file '" + path + "' is empty");
  if (!model.ParseFromString(bytes))
    throw ModelError("model file '" + path + "' is not a valid ONNX model (truncated or corrupt)");
  return import_model(model, std::filesystem::path(path).parent_path().string());
}

}  // namespace onnxtrain::ir
