// What an embedder gives a device type's runtime, or asks of it, without knowing the device (the Python package:
// PyTorch's allocator for a GPU's memory, the NVIDIA wheels' folders for its libraries). A device type's runtime
// registers its hooks (kernels/cuda/runtime.cpp for CUDA); a type without them has none to give.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "onnxtrain/device.h"

namespace onnxtrain::kernels {

// Where a device's memory comes from, when not its runtime's own allocator: `reserve` runs with the device current
// and returns nullptr when it is full; `release` gets a block once the device has finished with it.
struct MemorySource {
  std::string name;
  std::function<void*(size_t bytes)> reserve;
  std::function<void(void* block)> release;
};

struct DeviceRuntime {
  // The source the devices of the type take their memory from when they take their first block from now.
  std::function<void(MemorySource)> set_memory_source;
  std::function<std::string()> memory_source;  // its name: the runtime's own allocator's without one
  // A folder to look for the runtime's libraries in (before their first use), and the file of its math library
  // (loaded now if it was not; an UnsupportedError saying where it looked when it cannot be).
  std::function<void(const std::string& dir)> add_library_dir;
  std::function<std::string()> math_library;
  // Copies from the type's devices to the host since the process began: a step with static shapes makes none.
  std::function<int64_t()> copies_to_host;
};

bool register_device_runtime(DeviceType type, DeviceRuntime runtime);
// The runtime of a device type; nullptr when this build has none (a build without CUDA).
const DeviceRuntime* device_runtime(DeviceType type);

}  // namespace onnxtrain::kernels
