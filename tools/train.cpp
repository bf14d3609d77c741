// `onnxtrain train MODEL --loss NAME --dims sym=value,... --steps N [--device cuda]`: trains on synthetic batches and
// prints, per step, the loss, the step time and the device's allocator's statistics.
#include <chrono>
#include <cstdio>
#include <random>

#include "onnxtrain/memory_stats.h"
#include "onnxtrain/training_session.h"
#include "tools/commands.h"

namespace onnxtrain::cli {
namespace {

struct TrainArgs {
  std::string model, loss, dims, optimizer = "adamw", int_range = "0,2", device = "cpu";
  MemoryArgs memory;
  int64_t steps = 10;
  double lr = 1e-3;
  uint64_t seed = 0;
};

}  // namespace

Bindings parse_dims(const std::string& text) {
  Bindings b;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find(',', start);
    std::string item = text.substr(start, end == std::string::npos ? std::string::npos : end - start);
    size_t eq = item.find('=');
    int64_t value = 0;
    try {
      size_t used = 0;
      value = eq == std::string::npos ? 0 : std::stoll(item.substr(eq + 1), &used);
      if (eq == std::string::npos || eq == 0 || used != item.size() - eq - 1 || value <= 0)
        throw std::invalid_argument("");
    } catch (const std::exception&) {
      throw InputError("--dims: '" + item + "' is not NAME=POSITIVE_INTEGER");
    }
    b[item.substr(0, eq)] = value;
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return b;
}

namespace {

std::pair<int64_t, int64_t> parse_range(const std::string& text) {
  size_t comma = text.find(',');
  try {
    if (comma == std::string::npos) throw std::invalid_argument("");
    int64_t lo = std::stoll(text.substr(0, comma)), hi = std::stoll(text.substr(comma + 1));
    if (hi <= lo) throw std::invalid_argument("");
    return {lo, hi};
  } catch (const std::exception&) {
    throw InputError("--int-range: '" + text + "' is not LOW,HIGH with LOW < HIGH");
  }
}

// A random batch for the model's inputs: normal floats, integers uniform in [lo, hi).
std::map<std::string, Tensor> synthetic_batch(const TrainingSession& s, const Bindings& dims,
                                              std::pair<int64_t, int64_t> range, std::mt19937_64& rng) {
  std::map<std::string, Tensor> batch;
  for (const std::string& name : s.input_names()) {
    std::vector<int64_t> shape;
    try {
      shape = s.session().input_dims(name, dims);
    } catch (const InputError& e) {
      throw InputError(std::string(e.what()) + ": give it with --dims");
    }
    const DType dtype = s.session().input_dtype(name);
    Tensor t(dtype, shape);
    std::normal_distribution<double> normal;
    std::uniform_int_distribution<int64_t> uniform(range.first, range.second - 1);
    for (int64_t i = 0; i < t.numel(); ++i) {
      switch (dtype) {
        case DType::kFloat32: t.data<float>()[i] = float(normal(rng)); break;
        case DType::kFloat64: t.data<double>()[i] = normal(rng); break;
        case DType::kInt64: t.data<int64_t>()[i] = uniform(rng); break;
        case DType::kInt32: t.data<int32_t>()[i] = int32_t(uniform(rng)); break;
        case DType::kBool: t.data<bool>()[i] = uniform(rng) % 2; break;
        default:
          throw UnsupportedError("input '" + name + "': synthetic " + dtype_name(dtype) + " data is not supported");
      }
    }
    batch[name] = t;
  }
  return batch;
}

double mib(int64_t b) { return double(b) / (1024.0 * 1024.0); }

void train(const TrainArgs& a) {
  if (a.steps <= 0) throw InputError("--steps must be positive, got " + std::to_string(a.steps));
  if (!(a.lr > 0)) throw InputError("--lr must be positive, got " + std::to_string(a.lr));
  Bindings dims = parse_dims(a.dims);
  auto range = parse_range(a.int_range);
  OptimizerOptions opt;
  opt.kind = a.optimizer;
  opt.lr = a.lr;
  SessionOptions options = session_options(a.memory, dims);
  options.device = parse_device(a.device);
  TrainingSession s = TrainingSession::load(a.model, a.loss, opt, options);
  if (a.memory.level || !a.memory.budget.empty() || !a.memory.config.empty())
    std::printf("%s", s.session().memory_report_text(dims).c_str());
  std::mt19937_64 rng(a.seed);
  std::map<std::string, Tensor> batch = synthetic_batch(s, dims, range, rng);
  std::printf("training %s on %s: %zu parameters, optimizer %s, lr %g\n", a.model.c_str(),
              options.device.str().c_str(), s.parameter_names().size(), a.optimizer.c_str(), a.lr);
  std::printf("%6s %12s %10s %14s %14s %12s %12s\n", "step", "loss", "ms", "allocated MiB", "peak MiB", "cached MiB",
              "stash MiB");
  for (int64_t step = 1; step <= a.steps; ++step) {
    reset_peak_stats(options.device);
    auto t0 = std::chrono::steady_clock::now();
    double loss = s.train_step(batch);
    s.optimizer_step();
    s.lazy_reset_grad();
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    MemoryStats st = memory_stats(options.device);
    std::printf("%6lld %12.6f %10.2f %14.2f %14.2f %12.2f %12.2f\n", (long long)step, loss, ms, mib(st.allocated),
                mib(st.peak_allocated), mib(st.cached), mib(s.last_stash_bytes()));
  }
}

}  // namespace

void add_train(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "Train a model that computes a scalar loss, on synthetic batches");
  auto a = std::make_shared<TrainArgs>();
  cmd->add_option("model", a->model, "ONNX model file whose graph computes the loss")->required();
  cmd->add_option("--loss", a->loss, "name of the scalar loss output")->required();
  cmd->add_option("--dims", a->dims, "values of the inputs' symbolic dims: sym=value,...");
  cmd->add_option("--steps", a->steps, "training steps (default 10)");
  cmd->add_option("--optimizer", a->optimizer, "adamw or sgd (default adamw)")->check(CLI::IsMember({"adamw", "sgd"}));
  cmd->add_option("--lr", a->lr, "learning rate (default 1e-3)");
  cmd->add_option("--int-range", a->int_range, "integer inputs are drawn uniformly from LOW,HIGH-1 (default 0,2)");
  cmd->add_option("--seed", a->seed, "seed of the synthetic batch");
  cmd->add_option("--device", a->device, "where to train: cpu (the default), cuda, cuda:1, ... (the statistics are "
                  "that device's allocator's)");
  add_memory_options(cmd, a->memory);
  cmd->callback([a] { train(*a); });
}

}  // namespace onnxtrain::cli
