// What a Session holds behind its public face (include/onnxtrain/session.h): the compiled Executable, the
// allocator it runs on, the profile and the memory recorder; and the sessions onnxtrain's own code builds from
// an ir::Graph. For onnxtrain's code (the bindings, the tests, the fuzzers), not for its users.
#pragma once
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "core/allocator.h"
#include "memory/executable.h"
#include "memory/predict.h"
#include "onnxtrain/session.h"
#include "runtime/compile.h"
#include "runtime/executor.h"
#include "runtime/memory_recorder.h"

namespace onnxtrain {

struct RunState::Impl {
  runtime::Env env;
  uint64_t seed = 0;
  Bindings dims;  // the forward call's dims by symbol
  bool consumed = false;
};

struct Session::Impl {
  Impl(memory::Executable exe, SessionOptions options);

  memory::Executable exe;
  // Per step, the `wrt` gradients a backward step makes final; last, one more entry: those no step makes.
  std::vector<std::vector<size_t>> gradients_by_step;
  SessionOptions options;
  CachingAllocator* alloc;
  std::map<const ir::Value*, Tensor> device_initializers;  // on another device than the host: their copies there
  uint64_t run_count = 0;
  std::unique_ptr<runtime::Profile> profile;
  std::unique_ptr<runtime::MemoryRecorder> recorder;
  // Per plan step, what its node's runs work out (kernels::NodeCache), for the thread that holds caches_mu (a
  // second thread running the session at the same time runs without).
  std::vector<kernels::NodeCache> node_caches;
  std::mutex caches_mu;

  const ir::Graph& graph() const { return *exe.graph; }
  // Puts the feeds and the initializers into env; the call's dims by symbol.
  Bindings feed(const Session& s, runtime::Env& env, const std::map<std::string, Tensor>& feeds,
                bool forward_only) const;
  void end_of_step();  // trims the allocator unless told to keep its cache
  bool output_grad_may_be_unset(const ir::Value* gin) const;
  uint64_t next_seed() { return options.seed + 0x5851F42D4C957F2Dull * run_count++; }
  // Executes plan steps [begin, end) in env: random ops drawing from `seed`, with the call's dims.
  void execute(size_t begin, size_t end, runtime::Env& env, uint64_t seed, const Bindings& dims,
               std::function<void(size_t)> after_step = nullptr);
};

// The compile options SessionOptions stand for: the memory optimizer's config and budget parsed (ConfigError).
runtime::CompileOptions compile_options(const SessionOptions& o);

// Sessions of a graph built in memory.
Session inference_session(std::unique_ptr<ir::Graph> graph, SessionOptions options = {});
Session training_session(std::unique_ptr<ir::Graph> graph, const TrainingSpec& spec, SessionOptions options = {});

}  // namespace onnxtrain
