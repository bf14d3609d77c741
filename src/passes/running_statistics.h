// Training BatchNormalization's running statistics as outputs: the one place that turns the statistics a training
// step updates into forward outputs (for onnxtrain.Module's buffers and TrainingSession's alike), so that the
// caller writes them back over the inputs they came from after the step.
#pragma once
#include <map>
#include <set>
#include <string>

#include "ir/graph.h"

namespace onnxtrain::passes {

// For each BatchNormalization in training mode whose running mean or variance is one of `inputs`: its updated
// statistic made a graph output (named "<input>.updated" where the node left it unnamed). With `unbiased`, the
// running variance moves by the batch's unbiased variance, as PyTorch's BatchNorm does (onnxtrain's attribute
// unbiased_running_var), else by its population variance, as ONNX's does. Returns {output: input it updates};
// outputs already among the graph's are not added again.
std::map<std::string, std::string> expose_running_statistics(ir::Graph& g, const std::set<std::string>& inputs,
                                                             bool unbiased);

}  // namespace onnxtrain::passes
