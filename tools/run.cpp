// `onnxtrain run MODEL --input name=file.pb ...`: runs a model on TensorProto files.
#include <filesystem>
#include <iostream>

#include "onnxtrain/files.h"
#include "onnxtrain/session.h"
#include "tools/commands.h"

namespace onnxtrain::cli {

static void print_tensor(const std::string& name, const Tensor& t) {
  std::cout << name << ": " << dtype_name(t.dtype()) << dims_str(t.dims()) << " =";
  auto v = t.to_double();
  for (size_t i = 0; i < v.size() && i < 16; ++i) std::cout << " " << v[i];
  if (v.size() > 16) std::cout << " ... (" << v.size() << " values)";
  std::cout << "\n";
}

void add_run(CLI::App& app) {
  auto* cmd = app.add_subcommand("run", "Run a model on inputs given as ONNX TensorProto files");
  struct Args {
    std::string model, out_dir;
    std::vector<std::string> inputs;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("model", a->model, "ONNX model file")->required();
  cmd->add_option("-i,--input", a->inputs, "NAME=FILE.pb (or FILE.pb, matched to inputs in order)");
  cmd->add_option("-o,--output-dir", a->out_dir, "save outputs as output_<i>.pb here instead of printing them");
  cmd->callback([a] {
    Session s = Session::load(a->model);
    std::map<std::string, Tensor> feeds;
    auto names = s.input_names();
    for (size_t i = 0; i < a->inputs.size(); ++i) {
      std::string spec = a->inputs[i], name, file = spec;
      auto eq = spec.find('=');
      if (eq != std::string::npos) {
        name = spec.substr(0, eq);
        file = spec.substr(eq + 1);
      } else if (i < names.size()) {
        name = names[i];
      } else {
        throw InputError("--input '" + spec + "': the model has only " + std::to_string(names.size()) + " inputs");
      }
      feeds[name] = load_tensor(file);
    }
    auto outs = s.run(feeds);
    if (!a->out_dir.empty()) std::filesystem::create_directories(a->out_dir);
    int k = 0;
    for (auto& name : s.output_names()) {
      if (a->out_dir.empty()) {
        print_tensor(name, outs.at(name));
      } else {
        save_tensor(outs.at(name), name, a->out_dir + "/output_" + std::to_string(k) + ".pb");
      }
      ++k;
    }
  });
}

}  // namespace onnxtrain::cli
