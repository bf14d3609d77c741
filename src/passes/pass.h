// Graph rewrites: one class per pass, each with a name and apply(graph) that
// says whether it changed anything; run_passes applies the ordered list.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace onnxtrain::passes {

class Pass {
 public:
  virtual ~Pass() = default;
  virtual std::string name() const = 0;
  // Rewrites g; returns true when it changed. Graph outputs and inputs are kept.
  virtual bool apply(ir::Graph& g) const = 0;
};

std::unique_ptr<Pass> constant_folding();
std::unique_ptr<Pass> common_subexpressions();
std::unique_ptr<Pass> dead_code();
std::unique_ptr<Pass> identity_elimination();
std::unique_ptr<Pass> cast_like_to_cast();
std::unique_ptr<Pass> gelu_fusion();
std::unique_ptr<Pass> narrow_gelu();
std::unique_ptr<Pass> norm_output_cast();
std::unique_ptr<Pass> dropout_fusion();
std::unique_ptr<Pass> norm_grad_residual();
std::unique_ptr<Pass> rms_norm_fusion();
std::unique_ptr<Pass> swiglu_fusion();
std::unique_ptr<Pass> rotary_embedding_fusion();
std::unique_ptr<Pass> transpose_gemm_fusion();
std::unique_ptr<Pass> linear_fusion();
std::unique_ptr<Pass> masked_softmax_fusion();
std::unique_ptr<Pass> attention_softmax_fusion();
std::unique_ptr<Pass> flash_attention_fusion();
std::unique_ptr<Pass> grouped_attention_fusion();
std::unique_ptr<Pass> rotary_past_transpose();
std::unique_ptr<Pass> attention_layout();
std::unique_ptr<Pass> shape_past_producer();
std::unique_ptr<Pass> linear_cross_entropy_fusion();
std::unique_ptr<Pass> cast_into_product();
std::unique_ptr<Pass> scatter_accumulation();
std::unique_ptr<Pass> slice_grads_to_concat();
// Not in the default list: the memory optimizer runs it on its recompute clones.
std::unique_ptr<Pass> gelu_recompute_fusion();

// Whether v is a float constant of one element that training does not update (a scale, a fill).
bool constant_scalar(const ir::Value* v);
// The value of a constant of one element that training does not update, any dtype (NaN for anything else).
double scalar_value(const ir::Value* v);
// Whether `axis` (negative counting from the end) is the last of `rank`.
inline bool last_axis(int64_t axis, int64_t rank) { return axis == -1 || axis == rank - 1; }
// The nodes of `op` in `domain` (ONNX's by default), in graph order: what a fusion starts from (collected before
// it adds or removes nodes).
std::vector<ir::Node*> nodes_of(const ir::Graph& g, const std::string& op, const std::string& domain = "");
// Whether n is given its first `count` inputs (a node read from a file may lack inputs its op requires: a fusion
// checks those it reads before it reads them).
bool has_inputs(const ir::Node* n, size_t count);
// v's producer when it is `op` of `domain` (ONNX's by default), else null.
ir::Node* made_by(const ir::Value* v, const std::string& op, const std::string& domain = "");
// The Cast that makes v by widening a bfloat16 or float16 value to float32 (exact), else null.
ir::Node* widening(const ir::Value* v);
// The other input of binary node n than `known` (null when n is not binary or `known` is not an input).
ir::Value* other_input(const ir::Node* n, const ir::Value* known);
// v's only reader when v is not a graph output (so a fusion may drop v), else null.
ir::Node* only_reader(const ir::Graph& g, const ir::Value* v);
// Whether `reader` is the only reader of v and v is not a graph output (so a fusion may drop v).
bool sole_reader(const ir::Graph& g, const ir::Value* v, const ir::Node* reader);
// A fusion's new node: `op_type` in `domain` at `opset` reads `inputs` and now makes `outs` (values made by the
// nodes it replaces, each of which gets a placeholder output instead, for remove_all, or new values of the
// graph's); bound and shape-inferred.
ir::Node* add_fused(ir::Graph& g, const std::string& domain, int64_t opset, const std::string& op_type,
                    const std::vector<ir::Value*>& inputs, const std::vector<ir::Value*>& outs, const std::string& name,
                    bool backward, ir::Attributes attrs = {});
// The Cast to a 16-bit float that is y's one reader but Shape nodes (through `reshape`, a Reshape of y read only
// by the Cast, where one stands between), as autocast narrows an op's float32 output for a product; nulls where y
// has another reader or is a graph output.
struct NarrowingReader {
  const ir::Node* reshape = nullptr;
  const ir::Node* cast = nullptr;
};
NarrowingReader narrowing_reader(const ir::Graph& g, const ir::Value* y);
// A Cast of the value an op writes (through `reshape` where one stands between) folded into the op: make(out) adds
// the op, writing out, the Cast's output itself, or with a Reshape a new value (named as the Reshape's input and
// `suffix`) that a new Reshape then makes the Cast's output of; the Reshape and the Cast go into `gone`.
void fold_cast(ir::Graph& g, const ir::Node* reshape, const ir::Node* cast, const std::string& suffix,
               const std::function<void(ir::Value* out)>& make, std::vector<const ir::Node*>& gone);
// Removes the nodes in `gone` (their outputs must have no remaining readers), then, with `resort`, orders the
// rest producers first (fusions put new nodes at the end); returns whether any went.
bool remove_all(ir::Graph& g, const std::vector<const ir::Node*>& gone, bool resort);

// The default list, in order: identity elimination, CastLike to Cast, GELU fusion, narrowed GELU, RMSNorm fusion, the
// norms' output cast, SwiGLU fusion, rotary embedding fusion, Linear fusion, Linear-cross-entropy fusion,
// masked-softmax fusion, attention-softmax fusion, flash-attention fusion, grouped-attention fusion, rotary embedding
// past a Transpose, attention layout, Shape past its producer, Transpose-into-Gemm fusion, Cast-into-product fusion,
// Dropout fusion, norm gradient residual, scatter accumulation, slice gradients to a Concat, constant folding, common
// subexpressions, dead code.
std::vector<std::unique_ptr<Pass>> default_passes();
// Applies the passes in order until none changes the graph (at most a few rounds).
void run_passes(ir::Graph& g, const std::vector<std::unique_ptr<Pass>>& passes);

}  // namespace onnxtrain::passes
