// The memory optimizer's command-line options (`plan` and `train`).
#include "tools/commands.h"

namespace onnxtrain::cli {

void add_memory_options(CLI::App* cmd, MemoryArgs& a) {
  cmd->add_option("--level", a.level,
                  "memory optimizer level: 0 (config only), 1 (transformer layer-wise), 2 (1 plus compromised plans)")
      ->check(CLI::Range(0, 2));
  cmd->add_option("--config", a.config, "recompute plans: ClusterId:Strategy:Count,... or a JSON file of them");
  cmd->add_option("--budget", a.budget,
                  "a fraction of the stash to keep at most (0.3) or a size for the step's predicted peak (6GiB): "
                  "the cheapest recompute plans that meet it are applied");
}

SessionOptions session_options(const MemoryArgs& a, const Bindings& dims) {
  SessionOptions o;
  o.memory_config = a.config;
  o.memory_level = a.level;
  o.memory_budget = a.budget;
  o.memory_dims = dims;
  return o;
}

}  // namespace onnxtrain::cli
