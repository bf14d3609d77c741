// TensorProto <-> Tensor, including external data files.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "ir/onnx_io.h"
#include "onnxtrain/error.h"

namespace onnxtrain::ir {

static std::string read_file(const std::string& path, const std::string& what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw IoError(what + ": cannot open '" + path + "'");
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void write_file_atomic(const std::string& path, const std::string& bytes) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) throw IoError("cannot write '" + tmp + "'");
    f.write(bytes.data(), std::streamsize(bytes.size()));
    f.flush();
    if (!f) throw IoError("writing '" + tmp + "' failed");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw IoError("cannot rename '" + tmp + "' to '" + path + "'");
}

// An external data entry's offset or length: a non-negative decimal integer.
static int64_t external_number(const std::string& text, const std::string& key, const std::string& where) {
  int64_t v = 0;
  bool ok = !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
  for (size_t i = 0; ok && i < text.size(); ++i)
    ok = !__builtin_mul_overflow(v, int64_t(10), &v) && !__builtin_add_overflow(v, int64_t(text[i] - '0'), &v);
  if (!ok) throw ModelError(where + ": external data " + key + " '" + text + "' is not a non-negative 64-bit integer");
  return v;
}

// Where a tensor's external data lies: `location` relative to the model's folder and inside it (no absolute path,
// no '..', no symbolic link leading out), as ONNX's own checker requires.
static std::filesystem::path external_path(const std::string& base_dir, const std::string& location,
                                           const std::string& where) {
  namespace fs = std::filesystem;
  if (location.empty()) throw ModelError(where + ": external data has no location");
  if (base_dir.empty())
    throw ModelError(where + ": external data '" + location +
                     "' can only be read beside a model loaded from a file (its folder)");
  fs::path rel(location);
  if (rel.has_root_name() || rel.has_root_directory())
    throw ModelError(where + ": external data location '" + location +
                     "' is absolute; it must lie in the model's folder");
  for (const fs::path& part : rel)
    if (part == "..") throw ModelError(where + ": external data location '" + location + "' leaves the model's folder");
  std::error_code ec;
  fs::path base = fs::weakly_canonical(base_dir, ec), full = fs::weakly_canonical(fs::path(base_dir) / rel, ec);
  if (ec) throw IoError(where + ": cannot resolve external data location '" + location + "': " + ec.message());
  auto [in_base, in_full] = std::mismatch(base.begin(), base.end(), full.begin(), full.end());
  if (in_base != base.end())
    throw ModelError(where + ": external data location '" + location + "' resolves to '" + full.string() +
                     "', outside the model's folder (through a symbolic link)");
  return full;
}

template <typename Src, typename Dst>
static void copy_field(const Src& field, Tensor& t, const std::string& where) {
  if (int64_t(field.size()) != t.numel())
    throw ModelError(where + ": tensor has " + std::to_string(field.size()) + " values for shape " +
                     dims_str(t.dims()));
  Dst* d = t.data<Dst>();
  for (int i = 0; i < field.size(); ++i) d[i] = Dst(field.Get(i));
}

static Tensor read_values(const onnx::TensorProto& p, const std::string& base_dir, const std::string& where) {
  DType dt = dtype_from_onnx(p.data_type());
  std::string w = where + " tensor '" + p.name() + "'";
  if (dt == DType::kUndefined)
    throw UnsupportedError(w + ": ONNX data type " + std::to_string(p.data_type()) + " is not supported");
  std::vector<int64_t> dims(p.dims().begin(), p.dims().end());
  for (auto d : dims)
    if (d < 0) throw ModelError(w + ": negative dim in " + dims_str(dims));
  const size_t nbytes = checked_nbytes(dims, dt, w);
  Tensor t(dt, dims);
  if (p.data_location() == onnx::TensorProto::EXTERNAL) {
    std::string location;
    int64_t offset = 0, length = -1;
    for (auto& kv : p.external_data()) {
      if (kv.key() == "location")
        location = kv.value();
      else if (kv.key() == "offset")
        offset = external_number(kv.value(), "offset", w);
      else if (kv.key() == "length")
        length = external_number(kv.value(), "length", w);
    }
    std::filesystem::path full = external_path(base_dir, location, w);
    if (length >= 0 && size_t(length) != nbytes)
      throw ModelError(w + ": external data length " + std::to_string(length) + " != " + std::to_string(nbytes) +
                       " bytes");
    std::error_code ec;
    const uintmax_t size = std::filesystem::file_size(full, ec);
    if (ec) throw IoError(w + ": cannot open external data file '" + full.string() + "': " + ec.message());
    if (uintmax_t(offset) > size || size - uintmax_t(offset) < nbytes)
      throw ModelError(w + ": external data file '" + full.string() + "' has " + std::to_string(size) +
                       " bytes, too few for " + std::to_string(nbytes) + " at offset " + std::to_string(offset));
    std::ifstream f(full, std::ios::binary);
    if (!f) throw IoError(w + ": cannot open external data file '" + full.string() + "'");
    f.seekg(offset);
    f.read(static_cast<char*>(t.raw()), std::streamsize(nbytes));
    if (size_t(f.gcount()) != nbytes) throw ModelError(w + ": external data file '" + full.string() + "' is too short");
    return t;
  }
  if (p.has_raw_data()) {
    if (p.raw_data().size() != nbytes)
      throw ModelError(w + ": raw data has " + std::to_string(p.raw_data().size()) + " bytes, expected " +
                       std::to_string(nbytes));
    if (nbytes) std::memcpy(t.raw(), p.raw_data().data(), nbytes);
    return t;
  }
  switch (dt) {
    case DType::kFloat32:
      copy_field<decltype(p.float_data()), float>(p.float_data(), t, w);
      break;
    case DType::kFloat64:
      copy_field<decltype(p.double_data()), double>(p.double_data(), t, w);
      break;
    case DType::kInt64:
      copy_field<decltype(p.int64_data()), int64_t>(p.int64_data(), t, w);
      break;
    case DType::kInt32:
      copy_field<decltype(p.int32_data()), int32_t>(p.int32_data(), t, w);
      break;
    case DType::kInt8:
      copy_field<decltype(p.int32_data()), int8_t>(p.int32_data(), t, w);
      break;
    case DType::kUInt8:
    case DType::kBool:
      copy_field<decltype(p.int32_data()), uint8_t>(p.int32_data(), t, w);
      break;
    case DType::kFloat16:
    case DType::kBFloat16:
      copy_field<decltype(p.int32_data()), uint16_t>(p.int32_data(), t, w);
      break;
    default:
      throw UnsupportedError(w + ": data type " + dtype_name(dt) + " is not supported");
  }
  return t;
}

Tensor tensor_from_proto(const onnx::TensorProto& p, const std::string& base_dir, const std::string& where) {
  Tensor t = read_values(p, base_dir, where);
  if (t.dtype() == DType::kBool)  // whatever the file holds, a bool reads as 0 or 1 (any other byte is true)
    for (uint8_t *b = t.data<uint8_t>(), *e = b + t.numel(); b != e; ++b) *b = *b != 0;
  return t;
}

void tensor_to_proto(const Tensor& t, const std::string& name, onnx::TensorProto* out) {
  out->set_name(name);
  out->set_data_type(int32_t(t.dtype()));
  for (auto d : t.dims()) out->add_dims(d);
  out->set_raw_data(std::string(static_cast<const char*>(t.raw()), t.nbytes()));
}

Tensor load_tensor_file(const std::string& path) {
  std::string bytes = read_file(path, "tensor file");
  onnx::TensorProto p;
  if (!p.ParseFromString(bytes)) throw ModelError("tensor file '" + path + "': not a valid TensorProto");
  return tensor_from_proto(p, std::filesystem::path(path).parent_path().string(), "file '" + path + "'");
}

}  // namespace onnxtrain::ir
