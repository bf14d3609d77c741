// onnxtrain::TrainingSession: trains an ONNX model whose graph computes a scalar
// loss, in the manner of ONNX Runtime's on-device training: train_step
// accumulates gradients, optimizer_step applies them, lazy_reset_grad starts
// the next accumulation; checkpoints and an inference model can be written.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "onnxtrain/session.h"

namespace onnxtrain {

struct OptimizerOptions {
  std::string kind = "adamw";  // "adamw" or "sgd"
  double lr = 1e-3;
  double weight_decay = 0;     // AdamW: decoupled; SGD: added to the gradient (PyTorch's conventions)
  double momentum = 0;         // SGD
  bool nesterov = false;       // SGD
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // AdamW
};

// Linear warm-up over `warmup_steps`, then linear decay to `final_fraction` of the
// learning rate at `total_steps` (no decay when total_steps is 0).
struct LrSchedule {
  int64_t warmup_steps = 0;
  int64_t total_steps = 0;
  double final_fraction = 0;
  double factor(int64_t step) const;
};

class TrainingSession {
 public:
  // `loss` names the model's scalar loss output. Every float initializer becomes a
  // parameter (or, when no gradient reaches it, a buffer such as BatchNorm statistics).
  static TrainingSession load(const std::string& path, const std::string& loss, OptimizerOptions optimizer = {},
                              SessionOptions options = {});
  static TrainingSession from_bytes(const std::string& bytes, const std::string& loss,
                                    OptimizerOptions optimizer = {}, SessionOptions options = {});

  // Forward and backward on one batch; returns the loss. Gradients add up until
  // lazy_reset_grad (gradient accumulation over micro-batches). Inputs on another device than the session's
  // (SessionOptions::device) are copied there.
  double train_step(const std::map<std::string, Tensor>& inputs);
  // The loss of one batch, without gradients.
  double eval_step(const std::map<std::string, Tensor>& inputs);
  // Updates the parameters with the accumulated gradients.
  void optimizer_step();
  // The next train_step starts a new accumulation.
  void lazy_reset_grad() { reset_grad_ = true; }

  void set_learning_rate(double lr) { opt_.lr = lr; }
  double learning_rate() const { return opt_.lr * schedule_.factor(step_); }  // what the next step uses
  void set_schedule(const LrSchedule& s) { schedule_ = s; }
  int64_t step() const { return step_; }  // optimizer steps taken

  // Parameters, optimizer state and step, in the format of docs/checkpoint.md, written atomically.
  void save_checkpoint(const std::string& path) const;
  void load_checkpoint(const std::string& path);
  // The model with the current parameters, for inference (only what `outputs` need; all outputs but the loss by
  // default).
  void export_model_for_inferencing(const std::string& path, std::vector<std::string> outputs = {}) const;

  std::vector<std::string> parameter_names() const { return params_; }
  std::vector<std::string> input_names() const { return inputs_; }
  // A parameter or buffer, on the session's device (clone() it to read it on the host).
  Tensor& tensor(const std::string& name) { return values_.at(name); }
  const Session& session() const { return *session_; }
  // Bytes held by the last train_step's stash while it was alive (for reports).
  int64_t last_stash_bytes() const { return last_stash_; }

 private:
  struct Model;  // the loaded graph (runtime/training_session.cpp)
  TrainingSession(Model model, const std::string& loss, OptimizerOptions optimizer, SessionOptions options);
  std::map<std::string, Tensor> feeds(const std::map<std::string, Tensor>& inputs) const;
  Tensor on_device(const Tensor& t) const;  // t, or its copy on the session's device

  std::string model_bytes_;  // the original model, for export
  std::string loss_;
  std::unique_ptr<Session> session_;
  CachingAllocator* alloc_ = nullptr;  // the session's device's: parameters, buffers, gradients, optimizer state
  OptimizerOptions opt_;
  LrSchedule schedule_;
  std::vector<std::string> inputs_;                 // the user's inputs
  std::vector<std::string> params_, buffers_;       // trained / carried tensors (graph inputs fed from values_)
  std::map<std::string, Tensor> values_;            // parameters and buffers
  std::map<std::string, Tensor> grads_, state1_, state2_;  // accumulated gradients; optimizer moments
  std::map<std::string, std::string> buffer_updates_;      // output name -> buffer it overwrites after a step
  int64_t step_ = 0;
  bool reset_grad_ = true;
  int64_t last_stash_ = 0;
};

}  // namespace onnxtrain
