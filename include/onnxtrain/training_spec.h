// What a training session differentiates: the inputs that get gradients, of which loss, and the running statistics
// a step updates.
#pragma once
#include <set>
#include <string>
#include <vector>

namespace onnxtrain {

struct TrainingSpec {
  // Graph inputs or initializers that need gradients (parameters, inputs that require grad).
  std::vector<std::string> wrt;
  // A scalar loss output to differentiate; when empty, every forward output that
  // depends on `wrt` gets a gradient input ("<output>_grad") fed to the backward part.
  std::string loss;
  // Inputs holding running statistics (BatchNorm buffers) that a training step updates: their updated values
  // become forward outputs (Session::buffer_updates), the running variance moving by the unbiased batch variance
  // (PyTorch's) when `unbiased_running_var`, else by the population variance (ONNX's).
  std::set<std::string> running_statistics = {};
  bool unbiased_running_var = false;
};

}  // namespace onnxtrain
