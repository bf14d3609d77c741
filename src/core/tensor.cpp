#include "onnxtrain/tensor.h"

#include <cassert>
#include <cstring>

#include "core/allocator.h"
#include "onnxtrain/error.h"

namespace onnxtrain {

std::shared_ptr<Storage> Storage::allocate(size_t bytes, CachingAllocator* alloc) {
  auto s = std::shared_ptr<Storage>(new Storage());
  s->alloc_ = alloc ? alloc : &CachingAllocator::global();
  s->data_ = s->alloc_->allocate(bytes);
  s->bytes_ = bytes;
  s->device_ = s->alloc_->device();
  return s;
}

std::shared_ptr<Storage> Storage::borrow(void* data, size_t bytes, std::function<void()> release, Device device) {
  auto s = std::shared_ptr<Storage>(new Storage());
  s->data_ = data;
  s->bytes_ = bytes;
  s->device_ = device;
  s->release_ = std::move(release);
  return s;
}

Storage::~Storage() {
  if (alloc_) alloc_->free(data_);
  if (release_) release_();
}

int64_t numel_of(const std::vector<int64_t>& d) {
  int64_t n = 1;
  for (auto x : d) n *= x;
  return n;
}

size_t checked_nbytes(const std::vector<int64_t>& dims, DType dtype, const std::string& what) {
  int64_t n = int64_t(dtype_size(dtype));
  for (int64_t d : dims)
    if (d < 0 || __builtin_mul_overflow(n, d, &n))
      throw ShapeError(what + ": a tensor of shape " + dims_str(dims) + " and dtype " + dtype_name(dtype) +
                       (d < 0 ? " has a negative dim" : " would hold more than 2^63 bytes"));
  return size_t(n);
}

std::string dims_str(const std::vector<int64_t>& d) {
  std::string r = "[";
  for (size_t i = 0; i < d.size(); ++i) r += (i ? ", " : "") + std::to_string(d[i]);
  return r + "]";
}

Tensor::Tensor(DType dtype, std::vector<int64_t> dims, CachingAllocator* alloc)
    : dtype_(dtype), dims_(std::move(dims)) {
  storage_ = Storage::allocate(checked_nbytes(dims_, dtype_, "tensor"), alloc);
}

Tensor::Tensor(DType dtype, std::vector<int64_t> dims, std::shared_ptr<Storage> storage)
    : dtype_(dtype), dims_(std::move(dims)), storage_(std::move(storage)) {}

// The memory t's bytes are in: memory without an allocator is the caller's, of its device's kind.
static DeviceMemory& memory_of(const Tensor& t) {
  const CachingAllocator* alloc = t.storage()->allocator();
  return alloc ? alloc->memory() : CachingAllocator::of(t.device()).memory();
}

// Whether the host can read t's memory in place.
static bool on_host(const Tensor& t) { return !t.storage() || t.device() == kCpu || memory_of(t).host_readable(); }

Tensor Tensor::zeros(DType dtype, std::vector<int64_t> dims, CachingAllocator* alloc) {
  if (alloc && !alloc->memory().host_readable()) return zeros(dtype, std::move(dims)).clone(alloc);
  Tensor t(dtype, std::move(dims), alloc);
  std::memset(t.raw(), 0, t.nbytes());
  return t;
}

int64_t Tensor::numel() const { return numel_of(dims_); }

Tensor Tensor::reshaped(std::vector<int64_t> dims) const {
  assert(numel_of(dims) == numel());
  return Tensor(dtype_, std::move(dims), storage_);
}

Tensor Tensor::clone(CachingAllocator* alloc) const {
  Tensor t(dtype_, dims_, alloc);
  t.copy_from(*this);
  return t;
}

void Tensor::copy_from(const Tensor& src) {
  if (src.dtype() != dtype_ || src.numel() != numel())
    throw InputError("copy: " + dtype_name(src.dtype()) + " " + dims_str(src.dims()) + " into " +
                     dtype_name(dtype_) + " " + dims_str(dims_));
  if (!nbytes()) return;
  DeviceMemory &from = memory_of(src), &to = memory_of(*this);
  if (from.host_readable() && to.host_readable())
    std::memmove(raw(), src.raw(), nbytes());
  else if (from.host_readable())
    to.copy_from_host(raw(), src.raw(), nbytes());
  else if (to.host_readable())
    from.copy_to_host(raw(), src.raw(), nbytes());
  else
    copy_from(src.clone());  // between two devices' memories, through the host
}

template <typename F>
static void for_each_value(const Tensor& t, F f) {
  int64_t n = t.numel();
  switch (t.dtype()) {
    case DType::kInt64:
      for (int64_t i = 0; i < n; ++i) f(t.data<int64_t>()[i]);
      break;
    case DType::kInt32:
      for (int64_t i = 0; i < n; ++i) f(t.data<int32_t>()[i]);
      break;
    case DType::kInt8:
      for (int64_t i = 0; i < n; ++i) f(t.data<int8_t>()[i]);
      break;
    case DType::kUInt8:
    case DType::kBool:
      for (int64_t i = 0; i < n; ++i) f(t.data<uint8_t>()[i]);
      break;
    case DType::kFloat32:
      for (int64_t i = 0; i < n; ++i) f(t.data<float>()[i]);
      break;
    case DType::kFloat64:
      for (int64_t i = 0; i < n; ++i) f(t.data<double>()[i]);
      break;
    case DType::kFloat16:
      for (int64_t i = 0; i < n; ++i) f(half_to_float(t.data<Half>()[i]));
      break;
    case DType::kBFloat16:
      for (int64_t i = 0; i < n; ++i) f(bf16_to_float(t.data<BFloat16>()[i]));
      break;
    default:
      break;
  }
}

std::vector<int64_t> Tensor::to_int64() const {
  if (!on_host(*this)) return clone().to_int64();
  std::vector<int64_t> r;
  r.reserve(size_t(numel()));
  for_each_value(*this, [&](auto v) { r.push_back(int64_t(v)); });
  return r;
}

std::vector<double> Tensor::to_double() const {
  if (!on_host(*this)) return clone().to_double();
  std::vector<double> r;
  r.reserve(size_t(numel()));
  for_each_value(*this, [&](auto v) { r.push_back(double(v)); });
  return r;
}

}  // namespace onnxtrain
