// `onnxtrain plan MODEL --loss NAME --dims sym=value,...`: the memory optimizer's
// report and the step's predicted memory, without running anything.
#include <spawn.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>

#include "onnxtrain/files.h"
#include "onnxtrain/training_session.h"
#include "tools/commands.h"

extern char** environ;

namespace onnxtrain::cli {
namespace {

struct PlanArgs {
  std::string model, loss, dims, limit, max_dim, json, plot;
  MemoryArgs memory;
};

TrainingSession make_session(const PlanArgs& a, const MemoryArgs& memory, const Bindings& dims) {
  return TrainingSession::load(a.model, a.loss, OptimizerOptions{}, session_options(memory, dims));
}

// Draws the predicted timeline JSON at `json_path` into `png` with the Python package (matplotlib).
void draw(const std::string& json_path, const std::string& png) {
  const char* python = std::getenv("ONNXTRAIN_PYTHON");
#ifdef ONNXTRAIN_PYTHON
  std::string exe = python && *python ? python : ONNXTRAIN_PYTHON;
#else
  std::string exe = python && *python ? python : "python3";
#endif
  std::vector<std::string> args = {exe, "-m", "onnxtrain.timeline", json_path, png};
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  pid_t pid;
  int status = 0;
  if (posix_spawnp(&pid, exe.c_str(), nullptr, nullptr, argv.data(), environ) != 0 || waitpid(pid, &status, 0) < 0 ||
      !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw Error("--plot: '" + exe + " -m onnxtrain.timeline' could not draw " + png +
                " (it needs the onnxtrain Python package and matplotlib; set ONNXTRAIN_PYTHON to choose the "
                "interpreter); "
                "the timeline's data is in " + json_path);
}

void plan(const PlanArgs& a) {
  if (!a.limit.empty() && a.max_dim.empty()) throw InputError("--limit needs --max-dim SYM: the dim to fit under it");
  int64_t limit = a.limit.empty() ? 0 : parse_size(a.limit, "--limit");
  Bindings dims = parse_dims(a.dims);
  TrainingSession s = make_session(a, a.memory, dims);
  const Session& session = s.session();
  std::printf("%s", session.memory_report_text(dims).c_str());
  std::printf("(optimizer state: AdamW's two moments per parameter)\n");
  if (limit) {
    Bindings rest = dims;
    rest.erase(a.max_dim);
    std::printf("largest %s whose step fits in %s (AdamW):", a.max_dim.c_str(), a.limit.c_str());
    for (int level = 0; level <= 2; ++level) {
      MemoryArgs m;
      m.level = level;
      const int64_t fits = make_session(a, m, dims).session().largest_fitting(a.max_dim, rest, limit);
      std::printf(" level %d: %lld;", level, (long long)fits);
    }
    std::printf(" these options: %lld\n", (long long)session.largest_fitting(a.max_dim, rest, limit));
  }
  if (!a.json.empty()) write_file_atomic(a.json, session.memory_report_text(dims, true));
  if (!a.plot.empty()) {
    std::string json_path = a.plot.substr(0, a.plot.rfind('.')) + ".json";
    write_file_atomic(json_path, session.memory_timeline(dims));
    draw(json_path, a.plot);
    std::printf("predicted timeline: %s (data: %s)\n", a.plot.c_str(), json_path.c_str());
  }
}

}  // namespace

void add_plan(CLI::App& app) {
  auto* cmd = app.add_subcommand("plan", "Report recompute plans and predict a training step's memory");
  auto a = std::make_shared<PlanArgs>();
  cmd->add_option("model", a->model, "ONNX model file whose graph computes the loss")->required();
  cmd->add_option("--loss", a->loss, "name of the scalar loss output")->required();
  cmd->add_option("--dims", a->dims, "values of the inputs' symbolic dims: sym=value,...")->required();
  add_memory_options(cmd, a->memory);
  cmd->add_option("--limit", a->limit, "a memory size (6GiB, 512MiB, bytes): report the largest --max-dim that fits");
  cmd->add_option("--max-dim", a->max_dim, "the symbolic dim to fit under --limit (e.g. batch)");
  cmd->add_option("--json", a->json, "also write the report as JSON to this file");
  cmd->add_option("--plot", a->plot, "draw the predicted memory timeline of one step to this PNG (and its .json)");
  cmd->callback([a] { plan(*a); });
}

}  // namespace onnxtrain::cli
