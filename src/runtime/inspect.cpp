// onnxtrain::inspect_model (onnxtrain/inspect.h): the model as loaded, bound and shape-inferred.
#include "onnxtrain/inspect.h"

#include <map>
#include <sstream>

#include "ir/onnx_io.h"
#include "kernels/kernel.h"
#include "kernels/shape_inference.h"
#include "onnxtrain/error.h"
#include "ops/bind.h"

namespace onnxtrain {

std::string inspect_model(const std::string& path) {
  std::ostringstream out;
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
  out << "model: " << path << "\n";
  out << "opsets:";
  for (auto& [d, v] : g->opsets) out << " " << (d.empty() ? "ai.onnx" : d) << "=" << v;
  out << "\ninputs:\n";
  for (auto* v : g->inputs) out << "  " << v->name << ": " << v->type_str() << "\n";
  out << "outputs:\n";
  for (auto* v : g->outputs)
    out << "  " << v->name << ": " << (inferred || v->has_shape ? v->type_str() : "?") << "\n";
  int64_t count = 0, bytes = 0;
  for (auto* v : g->initializers) {
    count += v->initializer->numel();
    bytes += int64_t(v->initializer->nbytes());
  }
  out << "parameters: " << g->initializers.size() << " tensors, " << count << " elements, " << bytes
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
  out << "ops (" << g->nodes().size() << " nodes; [where each has a kernel]):\n";
  for (auto& [op, k] : hist) out << "  " << op << ": " << k << " [" << where[op] << "]\n";
  if (!unsupported.empty()) {
    out << "unsupported ops:\n";
    for (auto& u : unsupported) out << "  " << u << "\n";
  }
  if (!why.empty()) out << "shape inference failed: " << why << "\n";
  if (inferred && !g->unknown_shape_nodes().empty()) {
    out << "nodes whose output shapes are known only at run time:";
    size_t k = 0;
    for (const ir::Node* n : g->unknown_shape_nodes())
      if (k++ < 8) out << " " << n->where() << ";";
    out << (g->unknown_shape_nodes().size() > 8 ? " ...\n" : "\n");
  }
  if (inferred && !g->invented_symbols().empty()) {
    out << "dims that depend on data:";
    for (auto& s : g->invented_symbols()) out << " " << s;
    out << "\n";
  }
  return out.str();
}

}  // namespace onnxtrain
