// onnxtrain command-line tool: inspect, run, conformance, train, plan.
#include <CLI/CLI.hpp>
#include <iostream>

#include "tools/commands.h"
#include "onnxtrain/error.h"

int main(int argc, char** argv) {
  CLI::App app{"onnxtrain: train and run ONNX models on the CPU"};
  app.require_subcommand(1);
  onnxtrain::cli::add_inspect(app);
  onnxtrain::cli::add_run(app);
  onnxtrain::cli::add_conformance(app);
  onnxtrain::cli::add_train(app);
  onnxtrain::cli::add_plan(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const onnxtrain::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "internal error (please report it): " << e.what() << "\n";
    return 2;
  }
  return onnxtrain::cli::exit_code();
}
