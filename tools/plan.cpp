// `onnxtrain plan MODEL --loss NAME --dims sym=value,...`: the memory optimizer's
// report and the step's predicted memory, without running anything.
#include <cstdio>
#include <fstream>

#include "ir/onnx_io.h"
#include "onnxtrain/training_session.h"
#include "tools/commands.h"

namespace onnxtrain::cli {
namespace {

struct PlanArgs {
  std::string model, loss, dims, config, limit, max_dim, json;
  double budget = 0;
  int level = 0;
};

// "6GiB", "512MiB", "100KiB" or a number of bytes.
int64_t parse_size(const std::string& text) {
  static const std::pair<const char*, int64_t> units[] = {{"GiB", 1LL << 30}, {"MiB", 1LL << 20}, {"KiB", 1LL << 10}, {"B", 1}};
  for (auto& [suffix, scale] : units) {
    std::string s(suffix);
    if (text.size() > s.size() && text.compare(text.size() - s.size(), s.size(), s) == 0) {
      try {
        size_t used = 0;
        double v = std::stod(text.substr(0, text.size() - s.size()), &used);
        if (used == text.size() - s.size() && v > 0) return int64_t(v * double(scale));
      } catch (const std::exception&) {
      }
      throw InputError("--limit: '" + text + "' is not a size such as 6GiB, 512MiB or 1000000");
    }
  }
  try {
    size_t used = 0;
    int64_t v = std::stoll(text, &used);
    if (used == text.size() && v > 0) return v;
  } catch (const std::exception&) {
  }
  throw InputError("--limit: '" + text + "' is not a size such as 6GiB, 512MiB or 1000000");
}

void plan(const PlanArgs& a) {
  if (a.budget < 0 || a.budget > 1) throw InputError("--budget must be a fraction of the stash in [0, 1], got " + std::to_string(a.budget));
  if (!a.limit.empty() && a.max_dim.empty()) throw InputError("--limit needs --max-dim SYM: the dim to fit under it");
  int64_t limit = a.limit.empty() ? 0 : parse_size(a.limit);
  Bindings dims = parse_dims(a.dims);
  SessionOptions o;
  o.memory_config = a.config;
  o.memory_budget = a.budget;
  o.memory_level = a.level;
  o.memory_dims = dims;
  TrainingSession s(ir::load_model_file(a.model), a.loss, OptimizerOptions{}, o);
  const Session& session = s.session();
  std::printf("%s", session.memory_report().str(dims).c_str());
  MemoryPrediction p = session.predict_memory(dims);
  std::printf("predicted: %s; AdamW state adds 2x the parameters\n", p.str().c_str());
  if (limit) {
    Bindings rest = dims;
    rest.erase(a.max_dim);
    int64_t best = session.largest_fitting(a.max_dim, rest, limit, 2.0);
    std::printf("largest %s that fits in %s with AdamW: %lld\n", a.max_dim.c_str(), a.limit.c_str(), (long long)best);
  }
  if (!a.json.empty()) ir::write_file_atomic(a.json, session.memory_report().json(dims));
}

}  // namespace

void add_plan(CLI::App& app) {
  auto* cmd = app.add_subcommand("plan", "Report recompute plans and predict a training step's memory");
  auto a = std::make_shared<PlanArgs>();
  cmd->add_option("model", a->model, "ONNX model file whose graph computes the loss")->required();
  cmd->add_option("--loss", a->loss, "name of the scalar loss output")->required();
  cmd->add_option("--dims", a->dims, "values of the inputs' symbolic dims: sym=value,...")->required();
  cmd->add_option("--config", a->config, "recompute plans: ClusterId:Strategy:Count,... or a JSON file of them");
  cmd->add_option("--level", a->level, "0: only the config; 1: recompute inside each detected transformer layer");
  cmd->add_option("--budget", a->budget, "keep at most this fraction of the stash, recomputing the cheapest plans");
  cmd->add_option("--limit", a->limit, "a memory size (6GiB, 512MiB, bytes): report the largest --max-dim that fits");
  cmd->add_option("--max-dim", a->max_dim, "the symbolic dim to fit under --limit (e.g. batch)");
  cmd->add_option("--json", a->json, "also write the report as JSON to this file");
  cmd->callback([a] { plan(*a); });
}

}  // namespace onnxtrain::cli
