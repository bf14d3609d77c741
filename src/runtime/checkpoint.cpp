#include "runtime/checkpoint.h"

#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "ir/onnx_io.h"
#include "onnxtrain/error.h"

namespace onnxtrain::runtime {

constexpr char kMagic[8] = {'O', 'N', 'N', 'X', 'T', 'R', 'C', 'K'};
constexpr uint32_t kVersion = 1;

static DType dtype_named(const std::string& name, const std::string& where) {
  for (DType t : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16, DType::kInt64, DType::kInt32,
                  DType::kInt8, DType::kUInt8, DType::kBool})
    if (dtype_name(t) == name) return t;
  throw CheckpointError(where + ": unknown dtype '" + name + "'");
}

void write_checkpoint(const std::string& path, const Checkpoint& c) {
  nlohmann::json header = {{"step", c.step}, {"learning_rate", c.learning_rate}, {"optimizer", c.optimizer}};
  nlohmann::json entries = nlohmann::json::array();
  std::string data;
  for (auto& [name, t] : c.tensors) {
    entries.push_back({{"name", name},
                       {"dtype", dtype_name(t.dtype())},
                       {"dims", t.dims()},
                       {"offset", data.size()},
                       {"nbytes", t.nbytes()}});
    data.append(static_cast<const char*>(t.raw()), t.nbytes());
  }
  header["tensors"] = entries;
  header["data_bytes"] = data.size();
  header["data_crc32"] = crc32(0L, reinterpret_cast<const Bytef*>(data.data()), uInt(data.size()));
  std::string h = header.dump();
  std::string bytes(kMagic, 8);
  uint32_t version = kVersion;
  uint64_t hlen = h.size();
  bytes.append(reinterpret_cast<const char*>(&version), 4);
  bytes.append(reinterpret_cast<const char*>(&hlen), 8);
  bytes += h;
  bytes += data;
  ir::write_file_atomic(path, bytes);
}

Checkpoint read_checkpoint(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw IoError("checkpoint '" + path + "' cannot be opened");
  std::ostringstream ss;
  ss << f.rdbuf();
  std::string bytes = ss.str();
  std::string where = "checkpoint '" + path + "'";
  if (bytes.size() < 20 || std::memcmp(bytes.data(), kMagic, 8) != 0)
    throw CheckpointError(
        where + ": not an onnxtrain checkpoint (bad magic or too short: " + std::to_string(bytes.size()) + " bytes)");
  uint32_t version;
  uint64_t hlen;
  std::memcpy(&version, bytes.data() + 8, 4);
  std::memcpy(&hlen, bytes.data() + 12, 8);
  if (version != kVersion)
    throw CheckpointError(where + ": format version " + std::to_string(version) + ", this onnxtrain reads version " +
                          std::to_string(kVersion));
  if (hlen > bytes.size() - 20)
    throw CheckpointError(where + ": truncated (header of " + std::to_string(hlen) + " bytes)");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes.substr(20, hlen));
    Checkpoint c;
    c.step = header.at("step");
    c.learning_rate = header.at("learning_rate");
    c.optimizer = header.at("optimizer");
    uint64_t data_bytes = header.at("data_bytes");
    const char* data = bytes.data() + 20 + hlen;
    if (data_bytes != bytes.size() - 20 - hlen)
      throw CheckpointError(where + ": truncated or padded (" + std::to_string(bytes.size() - 20 - hlen) +
                            " bytes of data, the header says " + std::to_string(data_bytes) + ")");
    uint64_t crc = crc32_z(0L, reinterpret_cast<const Bytef*>(data), size_t(data_bytes));
    if (crc != header.at("data_crc32").get<uint64_t>())
      throw CheckpointError(where + ": data checksum mismatch (corrupt)");
    for (auto& e : header.at("tensors")) {
      std::string name = e.at("name");
      std::vector<int64_t> dims = e.at("dims");
      uint64_t offset = e.at("offset"), nbytes = e.at("nbytes");
      DType dtype = dtype_named(e.at("dtype"), where);
      size_t need;
      try {
        need = checked_nbytes(dims, dtype, "tensor '" + name + "'");
      } catch (const ShapeError& bad) {
        throw CheckpointError(where + ": " + bad.what());
      }
      if (need != nbytes || offset > data_bytes || nbytes > data_bytes - offset)
        throw CheckpointError(where + ": tensor '" + name + "' does not fit its dims or the data section");
      Tensor t(dtype, dims);
      std::memcpy(t.raw(), data + offset, nbytes);
      c.tensors[name] = t;
    }
    return c;
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(where + ": malformed header (" + e.what() + ")");
  }
}

}  // namespace onnxtrain::runtime
