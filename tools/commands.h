// The CLI's subcommands, one file each.
#pragma once
#include <CLI/CLI.hpp>

namespace onnxtrain::cli {

void add_inspect(CLI::App& app);
void add_run(CLI::App& app);
void add_conformance(CLI::App& app);
void add_train(CLI::App& app);
// The process exit code set by the subcommand that ran.
int exit_code();
void set_exit_code(int code);

}  // namespace onnxtrain::cli
