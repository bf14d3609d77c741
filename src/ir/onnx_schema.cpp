#include "ir/onnx_schema.h"

#include <onnx/defs/schema.h>

#include <algorithm>
#include <map>

#include "onnxtrain/error.h"

namespace onnxtrain::ir {

// The newest opset of `domain` the linked onnx library has schemas for (0: none).
static int64_t newest_known_opset(const std::string& domain) {
  const auto& known = onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map();
  auto it = known.find(domain);
  return it == known.end() ? 0 : it->second.second;
}

static const onnx::OpSchema* schema_of(const Node& n) {
  if (n.opset <= 0) return nullptr;
  return onnx::OpSchemaRegistry::Schema(n.op_type, int(n.opset), n.domain);
}

void check_arity(const Node& n) {
  if (n.outputs.empty()) throw ModelError(n.where() + ": the node has no outputs");
  if (n.opset > newest_known_opset(n.domain)) return;
  const onnx::OpSchema* schema = schema_of(n);
  if (!schema) return;
  const auto& formal = schema->inputs();
  for (size_t i = 0; i < formal.size() && i < n.inputs.size(); ++i)
    if (!n.inputs[i] && formal[i].GetOption() == onnx::OpSchema::Single)
      throw ModelError(n.where() + ": input " + std::to_string(i) + " ('" + formal[i].GetName() +
                       "') is required but left empty");
  auto count = [&](const char* what, size_t given, int lo, int hi) {
    if (int64_t(given) >= lo && int64_t(given) <= hi) return;
    std::string takes = std::to_string(lo);
    if (hi > lo) takes += hi >= 1 << 20 ? " or more" : " to " + std::to_string(hi);
    throw ModelError(n.where() + ": " + std::to_string(given) + " " + what + ", opset " + std::to_string(n.opset) +
                     " takes " + takes);
  };
  count("inputs", n.inputs.size(), schema->min_input(), schema->max_input());
  count("outputs", n.outputs.size(), schema->min_output(), schema->max_output());
}

void check_input_types(const Node& n) {
  const onnx::OpSchema* schema = schema_of(n);
  if (!schema) return;
  const auto& formal = schema->inputs();
  std::map<std::string, size_t> first;  // type constraint -> the first input of it with a known dtype
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    const Value* v = n.inputs[i];
    if (!v || v->dtype == DType::kUndefined || formal.empty()) continue;
    // A variadic last formal input covers every further input; one not homogeneous (Loop's, Scan's) any types.
    const auto& f = formal[std::min(i, formal.size() - 1)];
    bool variadic = f.GetOption() == onnx::OpSchema::Variadic;
    if ((i >= formal.size() && !variadic) || (variadic && !f.GetIsHomogeneous())) continue;
    const std::string& type = f.GetTypeStr();
    const auto& constraints = schema->typeConstraintParams();
    auto c = std::find_if(constraints.begin(), constraints.end(), [&](auto& k) { return k.type_param_str == type; });
    // An input the schema allows only bool must be bool (kernels read its bytes as bool); other dtypes beyond the
    // schema's lists are onnxtrain's extensions (bfloat16 for ops of opsets that predate it, say).
    const bool bool_only = c == constraints.end() ? type == "tensor(bool)"
                                                  : c->allowed_type_strs == std::vector<std::string>{"tensor(bool)"};
    if (bool_only && v->dtype != DType::kBool)
      throw ModelError(n.where() + ": input " + std::to_string(i) + " ('" + v->name + "') is " + dtype_name(v->dtype) +
                       ", where the op takes bool");
    if (c == constraints.end()) continue;  // a fixed type, such as tensor(int64)
    auto [it, added] = first.emplace(type, i);
    const Value* u = n.inputs[it->second];
    if (!added && u->dtype != v->dtype)
      throw ModelError(n.where() + ": input " + std::to_string(i) + " ('" + v->name + "') is " + dtype_name(v->dtype) +
                       " and input " + std::to_string(it->second) + " ('" + u->name + "') " + dtype_name(u->dtype) +
                       ", where the op takes one type " + type + " for both");
  }
}

}  // namespace onnxtrain::ir
