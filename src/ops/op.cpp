#include "ops/op.h"

#include <map>

#include "onnxtrain/error.h"
#include "ops/grad.h"

namespace onnxtrain::ops {

static std::map<std::string, OpDef>& table() {
  static std::map<std::string, OpDef> t;
  return t;
}

bool register_ops(std::vector<OpDef> defs) {
  for (auto& d : defs) table()[d.domain + "::" + d.name] = std::move(d);
  return true;
}

const OpDef* find_op(const std::string& domain, const std::string& name) {
  std::string d = domain == "ai.onnx" ? "" : domain;
  auto it = table().find(d + "::" + name);
  return it == table().end() ? nullptr : &it->second;
}

std::vector<std::string> registered_ops() {
  std::vector<std::string> r;
  for (auto& [k, v] : table()) r.push_back(v.domain.empty() ? v.name : v.domain + "." + v.name);
  return r;
}

const std::vector<Dim>* InferCtx::value(size_t i) {
  if (!has(i)) return nullptr;
  read_ |= uint64_t(1) << i;
  InputInfo& in = in_[i];
  if (!in.value && in.tensor && (in.dtype == DType::kInt64 || in.dtype == DType::kInt32 || in.dtype == DType::kBool) &&
      in.tensor->numel() <= 4096) {
    auto v = in.tensor->to_int64();
    in.value = std::vector<Dim>(v.begin(), v.end());
  }
  return in.value ? &*in.value : nullptr;
}

std::optional<std::vector<int64_t>> InferCtx::int_values(size_t i) {
  const std::vector<Dim>* v = value(i);
  if (!v) return std::nullopt;
  std::vector<int64_t> r;
  for (auto& d : *v) {
    if (!d.is_const()) return std::nullopt;
    r.push_back(d.value());
  }
  return r;
}

void InferCtx::set(size_t i, DType dtype, Shape shape, std::optional<std::vector<Dim>> value) {
  if (i >= out_.size()) return;  // optional output not requested
  out_[i] = OutputInfo{dtype, std::move(shape), std::move(value)};
}

Dim InferCtx::fresh(const std::string& hint) {
  if (!graph_) fail("output size depends on data that is not available (" + hint + ")");
  return graph_->fresh_dim(node_.name.empty() ? hint : node_.op_type + "_" + hint);
}

void InferCtx::fail(const std::string& msg) const { throw ShapeError(node_.where() + ": " + msg); }

const InputInfo& InferCtx::input(size_t i) const {
  if (i >= in_.size()) fail("has no input " + std::to_string(i) + " (" + std::to_string(in_.size()) + " given)");
  return in_[i];
}

int64_t InferCtx::axis(int64_t a, int64_t rank) const {
  if (a < -rank || a >= rank) fail("axis " + std::to_string(a) + " is out of range for rank " + std::to_string(rank));
  return a < 0 ? a + rank : a;
}

void InferCtx::unknown(const std::string& what) const {
  if (!graph_) fail(what + " is not known at run time");
  throw ShapeUnknown{what};
}

std::vector<InputInfo> runtime_inputs(const std::vector<const Tensor*>& tensors) {
  std::vector<InputInfo> r(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i]) continue;
    r[i].present = true;
    r[i].dtype = tensors[i]->dtype();
    r[i].shape = const_shape(tensors[i]->dims());
    r[i].tensor = tensors[i];
  }
  return r;
}

std::vector<InputInfo> symbolic_inputs(const ir::Node& n) {
  std::vector<InputInfo> r(n.inputs.size());
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    const ir::Value* v = n.inputs[i];
    if (!v) continue;
    r[i].present = true;
    r[i].dtype = v->dtype;
    r[i].shape = v->shape;
    if (v->initializer) r[i].tensor = &*v->initializer;
    r[i].value = v->sym_value;
  }
  return r;
}

void Op::grad(GradCtx& g) const { no_gradient(g); }

Dim Op::flops(const ir::Node& n) const {  // one operation per output element
  Dim total(0);
  for (const ir::Value* v : n.outputs)
    if (v && v->has_shape) total = total + shape_numel(v->shape);
  return total;
}

void no_gradient(const GradCtx& g) {
  const ir::Node& n = g.node();
  throw UnsupportedError(n.where() + ": op " + (n.domain.empty() ? "" : n.domain + ".") + n.op_type +
                         " has no gradient rule, but a gradient flows through it");
}

}  // namespace onnxtrain::ops
