// Runs the steps of an allocation plan over an environment of tensors.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <unordered_map>

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

// `dims`: the call's dims by symbol (kernels::RunArgs::dims). `after_step` (optional): called with each step's index
// once it has run, before the values it releases go.
void execute(const memory::AllocationPlan& plan, size_t begin, size_t end, Env& env, CachingAllocator* alloc,
             uint64_t seed, const Bindings& dims, Profile* profile = nullptr, MemoryRecorder* recorder = nullptr,
             const std::function<void(size_t)>& after_step = nullptr);

}  // namespace onnxtrain::runtime
