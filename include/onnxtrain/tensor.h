// A dense, contiguous, row-major tensor over shared storage.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "onnxtrain/device.h"
#include "onnxtrain/dtype.h"

namespace onnxtrain {

class CachingAllocator;

// Bytes on one device, owned by a caching allocator or borrowed from elsewhere (a torch tensor, a mapped file)
// with a deleter that releases the owner.
class Storage {
 public:
  static std::shared_ptr<Storage> allocate(size_t bytes, CachingAllocator* alloc);
  static std::shared_ptr<Storage> borrow(void* data, size_t bytes, std::function<void()> release, Device device = kCpu);
  ~Storage();
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  // The allocator it came from; null for borrowed memory.
  const CachingAllocator* allocator() const { return alloc_; }

 private:
  Storage() = default;
  void* data_ = nullptr;
  size_t bytes_ = 0;
  CachingAllocator* alloc_ = nullptr;
  Device device_;
  std::function<void()> release_;
};

class Tensor {
 public:
  Tensor() = default;
  // A new tensor from the allocator (the host's when null), on its device; uninitialized.
  Tensor(DType dtype, std::vector<int64_t> dims, CachingAllocator* alloc = nullptr);
  Tensor(DType dtype, std::vector<int64_t> dims, std::shared_ptr<Storage> storage);
  // Zeros, on alloc's device (the host's when null).
  static Tensor zeros(DType dtype, std::vector<int64_t> dims, CachingAllocator* alloc = nullptr);

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& dims() const { return dims_; }
  int64_t rank() const { return int64_t(dims_.size()); }
  int64_t numel() const;
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype_); }
  void* raw() const { return storage_ ? storage_->data() : nullptr; }
  template <typename T>
  T* data() const {
    return static_cast<T*>(raw());
  }
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  Device device() const { return storage_ ? storage_->device() : kCpu; }
  // Same storage, other dims (same element count).
  Tensor reshaped(std::vector<int64_t> dims) const;
  // A copy on alloc's device (the host when null), from any device.
  Tensor clone(CachingAllocator* alloc = nullptr) const;
  // src's elements into this tensor's memory, from any device (an InputError when src's dtype or element count
  // differs).
  void copy_from(const Tensor& src);
  // Elements as int64 (for shape-like integer tensors) or double, read on the host (copied there first from a
  // device whose memory the host cannot read).
  std::vector<int64_t> to_int64() const;
  std::vector<double> to_double() const;

 private:
  DType dtype_ = DType::kUndefined;
  std::vector<int64_t> dims_;
  std::shared_ptr<Storage> storage_;
};

std::string dims_str(const std::vector<int64_t>& d);
int64_t numel_of(const std::vector<int64_t>& d);
// The bytes of a tensor of these dims and dtype, checked: a negative dim, or an element count or byte size past
// 2^63, is a ShapeError naming `what` (a node's output, a model's tensor) and the shape.
size_t checked_nbytes(const std::vector<int64_t>& dims, DType dtype, const std::string& what);

}  // namespace onnxtrain
