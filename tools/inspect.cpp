// `onnxtrain inspect MODEL`: inputs and outputs with symbolic shapes, op
// histogram, parameters, unsupported ops.
#include <iostream>
#include <map>

#include "ir/onnx_io.h"
#include "kernels/shape_inference.h"
#include "onnxtrain/error.h"
#include "kernels/kernel.h"
#include "ops/bind.h"
#include "tools/commands.h"

namespace onnxtrain::cli {

static void inspect(const std::string& path) {
  auto g = ir::load_model_file(path);
  auto unsupported = ops::unsupported_ops(*g);
  bool inferred = false;
  std::string why;
  if (unsupported.empty()) {
    try {
      ops::bind_graph(*g);
      kernels::infer_shapes(*g);
      inferred = true;
    } catch (const Error& e) {
      why = e.what();
    }
  }
  std::cout << "model: " << path << "\n";
  std::cout << "opsets:";
  for (auto& [d, v] : g->opsets) std::cout << " " << (d.empty() ? "ai.onnx" : d) << "=" << v;
  std::cout << "\ninputs:\n";
  for (auto* v : g->inputs) std::cout << "  " << v->name << ": " << v->type_str() << "\n";
  std::cout << "outputs:\n";
  for (auto* v : g->outputs)
    std::cout << "  " << v->name << ": " << (inferred || v->has_shape ? v->type_str() : "?") << "\n";
  int64_t count = 0, bytes = 0;
  for (auto* v : g->initializers) {
    count += v->initializer->numel();
    bytes += int64_t(v->initializer->nbytes());
  }
  std::cout << "parameters: " << g->initializers.size() << " tensors, " << count << " elements, " << bytes
            << " bytes\n";
  std::map<std::string, int> hist;
  std::map<std::string, std::string> where;  // op -> the device types with a kernel of it, or "view"
  for (auto& n : g->nodes()) {
    if (hist[n->op_type]++) continue;
    if (n->op && n->op->is_view()) {
      where[n->op_type] = "view: no kernel";
      continue;
    }
    for (DeviceType t : kernels::kernel_device_types())
      if (kernels::lookup_kernel(Device{t, 0}, n->domain, n->op_type))
        where[n->op_type] += (where[n->op_type].empty() ? "" : " ") + device_type_name(t);
  }
  std::cout << "ops (" << g->nodes().size() << " nodes; [where each has a kernel]):\n";
  for (auto& [op, k] : hist) std::cout << "  " << op << ": " << k << " [" << where[op] << "]\n";
  if (!unsupported.empty()) {
    std::cout << "unsupported ops:\n";
    for (auto& u : unsupported) std::cout << "  " << u << "\n";
  }
  if (!why.empty()) std::cout << "shape inference failed: " << why << "\n";
  if (inferred && !g->unknown_shape_nodes().empty()) {
    std::cout << "nodes whose output shapes are known only at run time:";
    size_t k = 0;
    for (const ir::Node* n : g->unknown_shape_nodes())
      if (k++ < 8) std::cout << " " << n->where() << ";";
    std::cout << (g->unknown_shape_nodes().size() > 8 ? " ...\n" : "\n");
  }
  if (inferred && !g->invented_symbols().empty()) {
    std::cout << "dims that depend on data:";
    for (auto& s : g->invented_symbols()) std::cout << " " << s;
    std::cout << "\n";
  }
}

void add_inspect(CLI::App& app) {
  auto* cmd = app.add_subcommand("inspect", "Show a model's inputs, outputs, ops and parameters");
  auto path = std::make_shared<std::string>();
  cmd->add_option("model", *path, "ONNX model file")->required();
  cmd->callback([path] { inspect(*path); });
}

}  // namespace onnxtrain::cli
