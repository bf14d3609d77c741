// The CLI's subcommands, one file each.
#pragma once
#include <CLI/CLI.hpp>

#include "onnxtrain/bindings.h"
#include "onnxtrain/session.h"

namespace onnxtrain::cli {

void add_inspect(CLI::App& app);
void add_run(CLI::App& app);
void add_conformance(CLI::App& app);
void add_train(CLI::App& app);
void add_plan(CLI::App& app);
// "a=1,b=2" -> {a: 1, b: 2}; anything else is an InputError quoting the bad part.
Bindings parse_dims(const std::string& text);
// The memory optimizer's options, shared by `plan` and `train`.
struct MemoryArgs {
  int level = 0;
  std::string config, budget;
};
void add_memory_options(CLI::App* cmd, MemoryArgs& args);
// Session options for them and the batch's dims.
SessionOptions session_options(const MemoryArgs& args, const Bindings& dims);
// The process exit code set by the subcommand that ran.
int exit_code();
void set_exit_code(int code);

}  // namespace onnxtrain::cli
