#include "passes/pass.h"

#include <algorithm>
#include <cmath>

#include "kernels/shape_inference.h"
#include "ops/bind.h"

namespace onnxtrain::passes {

std::vector<std::unique_ptr<Pass>> default_passes() {
  std::vector<std::unique_ptr<Pass>> r;
  r.push_back(identity_elimination());
  r.push_back(cast_like_to_cast());
  r.push_back(gelu_fusion());
  r.push_back(narrow_gelu());
  r.push_back(rms_norm_fusion());
  r.push_back(norm_output_cast());
  r.push_back(swiglu_fusion());
  r.push_back(rotary_embedding_fusion());
  r.push_back(linear_fusion());
  r.push_back(linear_cross_entropy_fusion());
  r.push_back(masked_softmax_fusion());
  r.push_back(attention_softmax_fusion());
  r.push_back(flash_attention_fusion());
  r.push_back(grouped_attention_fusion());
  r.push_back(rotary_past_transpose());
  r.push_back(attention_layout());
  r.push_back(shape_past_producer());
  r.push_back(transpose_gemm_fusion());
  r.push_back(cast_into_product());
  r.push_back(dropout_fusion());
  r.push_back(norm_grad_residual());
  r.push_back(scatter_accumulation());
  r.push_back(slice_grads_to_concat());
  r.push_back(constant_folding());
  r.push_back(common_subexpressions());
  r.push_back(dead_code());
  return r;
}

bool constant_scalar(const ir::Value* v) {
  return v && v->initializer && !v->trainable && v->initializer->numel() == 1 && dtype_is_float(v->dtype);
}

double scalar_value(const ir::Value* v) {
  return v && v->initializer && !v->trainable && v->initializer->numel() == 1 ? v->initializer->to_double()[0] : NAN;
}

std::vector<ir::Node*> nodes_of(const ir::Graph& g, const std::string& op, const std::string& domain) {
  std::vector<ir::Node*> r;
  for (auto& n : g.nodes())
    if (n->op_type == op && n->domain == domain) r.push_back(n.get());
  return r;
}

bool has_inputs(const ir::Node* n, size_t count) {
  if (!n || n->inputs.size() < count) return false;
  return std::all_of(n->inputs.begin(), n->inputs.begin() + std::ptrdiff_t(count), [](auto* v) { return v; });
}

ir::Node* made_by(const ir::Value* v, const std::string& op, const std::string& domain) {
  ir::Node* p = v ? v->producer : nullptr;
  return p && p->op_type == op && p->domain == domain && has_inputs(p, 1) ? p : nullptr;
}

ir::Node* widening(const ir::Value* v) {
  ir::Node* c = made_by(v, "Cast");
  const DType from = c ? c->input(0)->dtype : DType::kUndefined;
  return c && v->dtype == DType::kFloat32 && (from == DType::kBFloat16 || from == DType::kFloat16) ? c : nullptr;
}

ir::Value* other_input(const ir::Node* n, const ir::Value* known) {
  if (!n || n->inputs.size() != 2) return nullptr;
  return n->input(0) == known ? n->input(1) : n->input(1) == known ? n->input(0) : nullptr;
}

ir::Node* only_reader(const ir::Graph& g, const ir::Value* v) {
  return v && v->consumers.size() == 1 && sole_reader(g, v, v->consumers[0]) ? const_cast<ir::Node*>(v->consumers[0])
                                                                             : nullptr;
}

bool sole_reader(const ir::Graph& g, const ir::Value* v, const ir::Node* reader) {
  return v->consumers.size() == 1 && v->consumers[0] == reader &&
         std::find(g.outputs.begin(), g.outputs.end(), v) == g.outputs.end();
}

ir::Node* add_fused(ir::Graph& g, const std::string& domain, int64_t opset, const std::string& op_type,
                    const std::vector<ir::Value*>& inputs, const std::vector<ir::Value*>& outs, const std::string& name,
                    bool backward, ir::Attributes attrs) {
  for (ir::Value* v : outs) {
    ir::Node* old = v ? v->producer : nullptr;
    if (!old) continue;  // (a new value, or an output not asked for)
    ir::Value* placeholder = g.add_value(g.unique_name(v->name + "_unfused"));
    placeholder->producer = old;
    std::replace(old->outputs.begin(), old->outputs.end(), v, placeholder);
  }
  ir::Node* f = g.add_node(op_type, inputs, outs, std::move(attrs), name);
  f->domain = domain;
  f->opset = int(opset);
  f->backward = backward;
  ops::bind_node(*f);
  kernels::infer_node(g, *f);
  return f;
}

NarrowingReader narrowing_reader(const ir::Graph& g, const ir::Value* y) {
  const ir::Node* next = nullptr;  // y's one reader but Shape nodes
  bool other = std::find(g.outputs.begin(), g.outputs.end(), y) != g.outputs.end();
  for (const ir::Node* r : y->consumers) {
    if (r->op_type == "Shape" && r->domain.empty()) continue;
    other = other || (next && next != r);
    next = r;
  }
  const ir::Node* reshape = next && next->op_type == "Reshape" && next->domain.empty() ? next : nullptr;
  if (reshape && (!has_inputs(reshape, 2) || reshape->input(0) != y)) return {};
  const ir::Node* cast = reshape ? only_reader(g, reshape->outputs[0]) : next;
  if (other || !cast || cast->op_type != "Cast" || !cast->domain.empty() || cast->outputs.size() != 1 ||
      !cast->outputs[0] || !dtype_is_16bit_float(cast->outputs[0]->dtype))
    return {};
  return {reshape, cast};
}

void fold_cast(ir::Graph& g, const ir::Node* reshape, const ir::Node* cast, const std::string& suffix,
               const std::function<void(ir::Value* out)>& make, std::vector<const ir::Node*>& gone) {
  ir::Value* out = reshape ? g.add_value(g.unique_name(reshape->input(0)->name + suffix)) : cast->outputs[0];
  make(out);
  if (reshape) {
    add_fused(g, "", reshape->opset, "Reshape", {out, reshape->input(1)}, {cast->outputs[0]},
              g.unique_name(reshape->name + suffix), reshape->backward, reshape->attrs);
    gone.push_back(reshape);
  }
  gone.push_back(cast);
}

bool remove_all(ir::Graph& g, const std::vector<const ir::Node*>& gone, bool resort) {
  if (gone.empty()) return false;
  g.remove_nodes([&](const ir::Node& n) { return std::find(gone.begin(), gone.end(), &n) != gone.end(); });
  if (resort) g.sort_nodes();
  return true;
}

void run_passes(ir::Graph& g, const std::vector<std::unique_ptr<Pass>>& passes) {
  constexpr int kMaxRounds = 4;
  for (int round = 0; round < kMaxRounds; ++round) {
    bool changed = false;
    for (auto& p : passes) changed = p->apply(g) || changed;
    if (!changed) return;
  }
}

}  // namespace onnxtrain::passes
