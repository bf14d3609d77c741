// Runs the steps of an allocation plan over an environment of tensors.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <unordered_map>

#include "kernels/run_node.h"
#include "memory/allocation_plan.h"
#include "onnxtrain/tensor.h"

namespace onnxtrain {
class CachingAllocator;
}

namespace onnxtrain::runtime {

using Env = std::unordered_map<const ir::Value*, Tensor>;

// Executes steps [begin, end) of `plan`; inputs must be in env; each value is
// dropped from env after its last reader, as the plan says.
// Time per op type, accumulated when a profile is passed to execute().
struct Profile {
  std::map<std::string, double> ms_by_op;
  std::map<std::string, int64_t> calls_by_op;
};

class MemoryRecorder;

// How one execute() call runs: on `alloc`'s device, random ops drawing from `seed`, with the call's `dims` by symbol
// (kernels::RunArgs::dims); optionally timed per op type (`profile`), recorded (`recorder`), told after each step
// (`after_step`: its index once it has run, before the values it releases go), and with `caches`, one
// kernels::NodeCache per plan step kept between calls.
struct Execution {
  CachingAllocator* alloc = nullptr;
  uint64_t seed = 0;
  const Bindings* dims = nullptr;
  Profile* profile = nullptr;
  MemoryRecorder* recorder = nullptr;
  std::function<void(size_t)> after_step;
  kernels::NodeCache* caches = nullptr;
};

void execute(const memory::AllocationPlan& plan, size_t begin, size_t end, Env& env, const Execution& x);

}  // namespace onnxtrain::runtime
