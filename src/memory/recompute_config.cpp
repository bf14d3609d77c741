// The user's choice of recompute plans in ONNX Runtime's config grammar: "Id:Strategy:Count" entries, inline or
// in a JSON file.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "memory/recompute.h"
#include "onnxtrain/error.h"

namespace onnxtrain::memory {

static ConfigEntry parse_entry(const std::string& entry) {
  auto bad = [&](const std::string& why) { return ConfigError("memory config entry '" + entry + "': " + why); };
  size_t a = entry.find(':'), b = a == std::string::npos ? a : entry.find(':', a + 1);
  if (a == std::string::npos || b == std::string::npos || entry.find(':', b + 1) != std::string::npos)
    throw bad("expected ClusterId:Strategy:Count");
  ConfigEntry e;
  e.cluster = entry.substr(0, a);
  if (e.cluster.empty()) throw bad("empty cluster id");
  std::string strategy = entry.substr(a + 1, b - a - 1), count = entry.substr(b + 1);
  if (strategy != "0" && strategy != "1" && strategy != "2")
    throw bad("strategy '" + strategy + "' is not 0 (off), 1 (recompute) or 2 (recompute with compromise)");
  e.strategy = strategy[0] - '0';
  try {
    size_t used = 0;
    e.count = std::stoll(count, &used);
    if (used != count.size() || e.count < -1) throw std::invalid_argument("");
  } catch (const std::exception&) {
    throw bad("count '" + count + "' is not -1 (all) or a number of occurrences >= 0");
  }
  return e;
}

std::vector<ConfigEntry> parse_config(const std::string& text) {
  std::vector<std::string> items;
  // A file: a path to a regular file or one ending in .json (a device or folder is never read); anything else is
  // an inline list.
  std::error_code ec;
  bool is_file =
      std::filesystem::is_regular_file(text, ec) || (text.size() > 5 && text.compare(text.size() - 5, 5, ".json") == 0);
  bool inline_list = !is_file;
  if (inline_list) {
    std::stringstream ss(text);
    for (std::string item; std::getline(ss, item, ',');) {
      item.erase(0, item.find_first_not_of(" \t"));
      item.erase(item.find_last_not_of(" \t") + 1);
      if (!item.empty()) items.push_back(item);
    }
  } else if (!text.empty()) {
    std::ifstream f(text);
    if (!f || !std::filesystem::is_regular_file(text, ec))
      throw ConfigError("memory config file '" + text + "' cannot be read");
    try {
      for (auto& e : nlohmann::json::parse(f)) items.push_back(e.get<std::string>());
    } catch (const nlohmann::json::exception& e) {
      throw ConfigError("memory config file '" + text + "': not a JSON array of strings (" + e.what() + ")");
    }
  }
  std::vector<ConfigEntry> r;
  for (auto& item : items) {
    ConfigEntry e = parse_entry(item);
    r.erase(std::remove_if(r.begin(), r.end(), [&](auto& x) { return x.cluster == e.cluster; }), r.end());
    r.push_back(e);  // a duplicate id: the last wins
  }
  return r;
}

}  // namespace onnxtrain::memory
