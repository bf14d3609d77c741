// Linear-cross-entropy fusion: SoftmaxCrossEntropyLoss(scores, target) without class weights or the log-probability
// output, whose scores are com.onnxtrain.Linear(X, W, B) (X of any rank, its rows flattened by a Reshape to (N, C)
// or already (N, C); in bfloat16 or float16 cast to float32 before or after the Reshape), every value between read
// by nothing else, becomes com.onnxtrain.LinearCrossEntropy(X, W, B, target): a language model's head and loss with
// no (N, C) scores held, in forward or for backward. When the Linear's output is read elsewhere too (a graph output:
// a transformers model returns its logits beside the loss), the fused node makes it as its scores output.
#include "passes/pass.h"

namespace onnxtrain::passes {
namespace {

class LinearCrossEntropyFusion : public Pass {
 public:
  std::string name() const override { return "linear_cross_entropy_fusion"; }
  bool apply(ir::Graph& g) const override {
    std::vector<const ir::Node*> gone;
    for (ir::Node* loss : nodes_of(g, "SoftmaxCrossEntropyLoss")) {
      ir::Value *scores = loss->input(0), *target = loss->input(1);
      if (loss->input(2) || (loss->outputs.size() > 1 && loss->outputs[1] && !loss->outputs[1]->consumers.empty()) ||
          !target || !target->has_shape || target->shape.size() != 1 || !scores || !scores->has_shape ||
          scores->shape.size() != 2)
        continue;
      std::vector<const ir::Node*> replaced{loss};
      // back from the scores, read by nothing else: [Cast] [Reshape] [Cast] Linear, one Cast at most; the Linear's
      // own output may have other readers (a model returning its logits): the fused node makes it then
      ir::Value* logits = scores;
      ir::Node* cast = nullptr;
      std::vector<ir::Node*> chain;
      auto step_over = [&](ir::Node* n) {
        if (!n) return;
        chain.push_back(n);
        replaced.push_back(n);
        logits = n->input(0);
      };
      step_over(cast = made_by(logits, "Cast"));
      step_over(made_by(logits, "Reshape"));
      if (!cast) step_over(cast = made_by(logits, "Cast"));
      ir::Node* linear = made_by(logits, "Linear", "com.onnxtrain");
      bool shared = !chain.empty() && !sole_reader(g, scores, loss);  // a value between read by another node
      for (size_t i = 0; i + 1 < chain.size(); ++i) shared |= !sole_reader(g, chain[i]->input(0), chain[i]);
      if (shared || !has_inputs(linear, 2) || linear->attrs.count("to")) continue;
      const ir::Node* first = chain.empty() ? loss : chain.back();  // the Linear's output's reader in the chain
      ir::Value* kept = sole_reader(g, logits, first) ? nullptr : logits;
      // (the rows of the Linear's output, flattened, are the scores' when their last dims agree); a 16-bit Linear
      // only with its scores cast to float32, as autocast writes a head and its loss
      const DType head = logits->dtype;
      const bool wide = head == DType::kFloat32 || head == DType::kFloat64;
      if (!logits->has_shape || logits->shape.size() < 2 || logits->shape.back() != scores->shape[1] ||
          (cast ? wide || cast->attr_int("to", 0) != int64_t(DType::kFloat32) : !wide))
        continue;
      replaced.push_back(linear);
      std::vector<ir::Value*> in{linear->input(0), linear->input(1), linear->input(2), target};
      ir::Attributes attrs;
      for (const char* a : {"reduction", "ignore_index"})
        if (loss->attrs.count(a)) attrs[a] = loss->attrs.at(a);
      ir::Value* lse = g.add_value(g.unique_name(loss->name + "_lse"));
      std::vector<ir::Value*> outs{loss->outputs[0], lse};
      if (kept) outs.insert(outs.end(), {nullptr, nullptr, nullptr, kept});
      add_fused(g, "com.onnxtrain", 1, "LinearCrossEntropy", in, outs,
                g.unique_name(loss->name + "_linear"), loss->backward, attrs);
      gone.insert(gone.end(), replaced.begin(), replaced.end());
    }
    return remove_all(g, gone, true);
  }
};

}  // namespace

std::unique_ptr<Pass> linear_cross_entropy_fusion() { return std::make_unique<LinearCrossEntropyFusion>(); }

}  // namespace onnxtrain::passes
