// Cast-into-product fusion: Cast(to float32) of a 16-bit product's output (or of its Reshape) that nothing else
// reads, where the product is com.onnxtrain.Linear, com.onnxtrain.FusedMatMul, or a Gemm of two inputs and alpha 1,
// becomes that product writing float32 (attribute `to`; a Gemm becomes a FusedMatMul with its flags), reshaped
// after when it was. Under autocast these are a weight's gradient (a bf16 dY^T X cast to the float32 parameter's
// gradient) and a layer's output added to the float32 residual stream. The GEMM accumulates in float32 anyway: the
// rounding to 16 bits, the 16-bit value and the copy go.
#include "passes/pass.h"

namespace onnxtrain::passes {
namespace {

// The product node whose 16-bit output `v` is, read only by `reader`, when it is one this pass fuses.
ir::Node* fusable_product(const ir::Graph& g, const ir::Value* v, const ir::Node* reader) {
  if (!v || (v->dtype != DType::kBFloat16 && v->dtype != DType::kFloat16) || only_reader(g, v) != reader)
    return nullptr;
  ir::Node* p = v->producer;
  if (!p || p->outputs.size() != 1 || p->attrs.count("to")) return nullptr;
  if (p->domain == "com.onnxtrain" && (p->op_type == "Linear" || p->op_type == "FusedMatMul")) return p;
  const bool plain_gemm = p->domain.empty() && p->op_type == "Gemm" && has_inputs(p, 2) && !p->input(2) &&
                          p->attr_float("alpha", 1) == 1.0f;
  return plain_gemm ? p : nullptr;
}

class CastIntoProduct : public Pass {
 public:
  std::string name() const override { return "cast_into_product"; }
  bool apply(ir::Graph& g) const override {
    std::vector<const ir::Node*> gone;
    for (ir::Node* cast : nodes_of(g, "Cast")) {
      if (cast->attr_int("to", 0) != int64_t(DType::kFloat32) || !has_inputs(cast, 1)) continue;
      // the product's output cast, or reshaped (a gradient brought to its parameter's shape) and then cast
      ir::Node* reshape = made_by(cast->input(0), "Reshape");
      if (reshape && (!has_inputs(reshape, 2) || only_reader(g, cast->input(0)) != cast)) reshape = nullptr;
      ir::Node* p = reshape ? fusable_product(g, reshape->input(0), reshape) : fusable_product(g, cast->input(0), cast);
      if (!p) continue;
      const bool gemm = p->op_type == "Gemm";
      ir::Attributes attrs = gemm ? ir::Attributes{{"transA", p->attr_int("transA", 0)},
                                                   {"transB", p->attr_int("transB", 0)}}
                                  : p->attrs;
      attrs["to"] = int64_t(DType::kFloat32);
      std::vector<ir::Value*> in = p->inputs;
      if (gemm) in.resize(2);
      fold_cast(
          g, reshape, cast, "_f32",
          [&](ir::Value* wide) {
            add_fused(g, "com.onnxtrain", 1, gemm ? "FusedMatMul" : p->op_type, in, {wide},
                      g.unique_name(p->name + "_f32"), p->backward, attrs);
          },
          gone);
      gone.push_back(p);
    }
    return remove_all(g, gone, true);
  }
};

}  // namespace

std::unique_ptr<Pass> cast_into_product() { return std::make_unique<CastIntoProduct>(); }

}  // namespace onnxtrain::passes
