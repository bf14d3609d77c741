// Where a tensor's bytes live and which kernels run on them. Device 0 is the host CPU; another device registers
// its kernels under its own id (kernels/kernel.h) and brings its own allocator.
#pragma once
#include <string>

namespace onnxtrain {

struct Device {
  int id = 0;
  friend bool operator==(Device a, Device b) { return a.id == b.id; }
  std::string str() const { return id == 0 ? "cpu" : "device" + std::to_string(id); }
};
inline constexpr Device kCpu{0};

}  // namespace onnxtrain
