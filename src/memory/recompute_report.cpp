// The recompute report: each cluster's frequency, status, bytes saved and flops, as a table or JSON.
#include <nlohmann/json.hpp>
#include <sstream>

#include "memory/recompute.h"

namespace onnxtrain::memory {

static std::string evaluated(const Dim& d, const Bindings& dims) {
  auto v = d.eval(dims);
  return v ? std::to_string(*v) : "?";
}

std::string RecomputeReport::str(const Bindings& dims) const {
  std::ostringstream os;
  os << "cluster | shape | frequency | status (applied/requested) | bytes saved each (symbolic = evaluated) | "
        "recompute flops each | config entry\n";
  for (auto& c : clusters)
    os << c.cluster << " | " << c.shape << " | " << c.frequency << " | " << (c.applied ? "ON" : "OFF") << " ("
       << c.applied << "/" << c.requested << ") | " << c.bytes.str() << " = " << evaluated(c.bytes, dims) << " | "
       << c.flops.str() << " = " << evaluated(c.flops, dims) << " | " << c.config()
       << (c.compromise ? " (compromise)" : "") << "\n";
  if (every_level)
    os << "every level: " << every_level << " plans costing at most a flop per byte saved (casts included) save "
       << every_level_bytes.str() << " = " << evaluated(every_level_bytes, dims) << " bytes of stash\n";
  if (!level.empty()) os << level << "\n";
  if (!budget.empty()) os << budget << "\n";
  return os.str();
}

std::string RecomputeReport::json(const Bindings& dims) const {
  nlohmann::json rows = nlohmann::json::array();
  for (auto& c : clusters) {
    auto b = c.bytes.eval(dims), f = c.flops.eval(dims);
    rows.push_back({{"cluster", c.cluster},
                    {"shape", c.shape},
                    {"frequency", c.frequency},
                    {"requested", c.requested},
                    {"applied", c.applied},
                    {"bytes", c.bytes.str()},
                    {"bytes_evaluated", b ? nlohmann::json(*b) : nullptr},
                    {"flops", c.flops.str()},
                    {"flops_evaluated", f ? nlohmann::json(*f) : nullptr},
                    {"config", c.config()},
                    {"compromise", c.compromise}});
  }
  auto every = every_level_bytes.eval(dims);
  return nlohmann::json{{"clusters", rows},
                        {"budget", budget},
                        {"level", level},
                        {"every_level", every_level},
                        {"every_level_bytes", every_level_bytes.str()},
                        {"every_level_bytes_evaluated", every ? nlohmann::json(*every) : nullptr}}
      .dump(2);
}

}  // namespace onnxtrain::memory

