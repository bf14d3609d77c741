#include "kernels/device_runtime.h"

#include <map>
#include <mutex>

namespace onnxtrain::kernels {
namespace {

std::mutex& mu() {
  static std::mutex m;
  return m;
}

std::map<DeviceType, DeviceRuntime>& runtimes() {
  static std::map<DeviceType, DeviceRuntime> r;
  return r;
}

}  // namespace

bool register_device_runtime(DeviceType type, DeviceRuntime runtime) {
  std::lock_guard<std::mutex> lock(mu());
  runtimes()[type] = std::move(runtime);
  return true;
}

const DeviceRuntime* device_runtime(DeviceType type) {
  std::lock_guard<std::mutex> lock(mu());
  auto it = runtimes().find(type);
  return it == runtimes().end() ? nullptr : &it->second;
}

}  // namespace onnxtrain::kernels
