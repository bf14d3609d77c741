#include "kernels/cuda/runtime.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "kernels/cuda/cublaslt.h"
#include "kernels/device_runtime.h"
#include "onnxtrain/error.h"

namespace onnxtrain::kernels::cuda {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(std::string("CUDA error in ") + what + ": " + cudaGetErrorString(e));
}

void check_launch(const char* what) { check(cudaGetLastError(), what); }

void unsupported_dtype(const char* kernel, DType t) {
  throw UnsupportedError(std::string("the CUDA kernel ") + kernel + " does not take dtype " + dtype_name(t));
}

void launch_error(const std::string& what) { throw Error("CUDA kernel launch: " + what); }

int device_count() {
  static const int n = [] {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
      cudaGetLastError();  // no driver or no device: clear the error, report none
      return 0;
    }
    return count;
  }();
  return n;
}

static thread_local cudaStream_t tls_stream = nullptr;
cudaStream_t current_stream() { return tls_stream; }
void set_current_stream(cudaStream_t stream) { tls_stream = stream; }

namespace {

// Runs f with `index` as the thread's current CUDA device, restoring the one before.
template <typename F>
auto on_device(int index, F f) {
  int before = 0;
  check(cudaGetDevice(&before), "cudaGetDevice");
  if (before != index) check(cudaSetDevice(index), "cudaSetDevice");
  struct Restore {
    int before, index;
    ~Restore() {
      if (before != index) cudaSetDevice(before);
    }
  } restore{before, index};
  return f();
}

// Copies from a device to the host, of every device, since the process began (what a step must not make).
std::atomic<int64_t>& copies_to_host() {
  static std::atomic<int64_t> n{0};
  return n;
}

std::mutex& source_mu() {
  static std::mutex mu;
  return mu;
}

std::optional<MemorySource>& source() {
  static std::optional<MemorySource> s;
  return s;
}

// One CUDA device's memory, in blocks from cudaMalloc or the source set before its first block (the caching
// allocator above it reuses them): a device only looked at (device_available, memory_stats) before PyTorch
// initialized CUDA still takes PyTorch's memory. Copies from and to the host are ordered after the work queued on
// the thread's stream, and complete before they return.
class CudaMemory : public DeviceMemory {
 public:
  explicit CudaMemory(int index) : index_(index) {}
  void* reserve(size_t bytes, size_t alignment) override {
    if (alignment > 256) return nullptr;  // cudaMalloc (and PyTorch's allocator) align to 256 bytes at least
    std::call_once(bound_, [&] {
      std::lock_guard<std::mutex> lock(source_mu());
      source_ = source();
    });
    if (source_) return on_device(index_, [&] { return source_->reserve(bytes); });
    void* p = nullptr;
    cudaError_t e = on_device(index_, [&] { return cudaMalloc(&p, bytes); });
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      return nullptr;
    }
    check(e, "cudaMalloc");
    return p;
  }
  void release(void* block) override {
    on_device(index_, [&] {
      if (!source_) return check(cudaFree(block), "cudaFree");
      // The source may hand the block out again at once, for work on another stream: the device's work first.
      // (A segment goes back rarely: when the caching allocator trims.)
      check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      source_->release(block);
    });
  }
  // PyTorch's caching allocator files a block under the stream current when it was reserved (the Python package
  // keeps it the queue), and hands it out again only to work on that stream, queued after onnxtrain's.
  void release_in_queue_order(void* block) override {
    if (!source_) return release(block);
    on_device(index_, [&] { source_->release(block); });
  }
  void copy_from_host(void* dst, const void* src, size_t bytes) override {
    copy(dst, src, bytes, cudaMemcpyHostToDevice);
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    copies_to_host()++;
    copy(dst, src, bytes, cudaMemcpyDeviceToHost);
  }
  bool host_readable() const override { return false; }
  // (The thread's stream is one for every device: a thread drives one device at a time.)
  void* queue() const override { return current_stream(); }
  void set_queue(void* queue) override { set_current_stream(static_cast<cudaStream_t>(queue)); }
  void synchronize() override {
    on_device(index_, [&] { check(cudaStreamSynchronize(current_stream()), "cudaStreamSynchronize"); });
  }

 private:
  void copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    on_device(index_, [&] {
      check(cudaMemcpyAsync(dst, src, bytes, kind, current_stream()), "cudaMemcpyAsync");
      check(cudaStreamSynchronize(current_stream()), "cudaStreamSynchronize");
    });
  }
  int index_;
  std::once_flag bound_;                  // the source taken at the first block
  std::optional<MemorySource> source_;   // (read only after it: a block released was reserved)
};

DeviceMemory& memory_of(int index) {
  if (index < 0 || index >= device_count())
    throw UnsupportedError("device " + cuda_device(index).str() + ": this process sees " +
                           std::to_string(device_count()) + " CUDA devices (a driver and a GPU are needed)");
  static std::mutex mu;
  static std::vector<std::unique_ptr<CudaMemory>> memories;
  std::lock_guard<std::mutex> lock(mu);
  if (memories.size() <= size_t(index)) memories.resize(size_t(index) + 1);
  if (!memories[size_t(index)]) memories[size_t(index)] = std::make_unique<CudaMemory>(index);
  return *memories[size_t(index)];
}

const bool kRegistered = [] {
  CachingAllocator::register_device_type(DeviceType::kCuda, memory_of);
  return true;
}();

// The embedder's way in (kernels/device_runtime.h): the devices' memory source, cuBLASLt's folders and the
// count of copies to the host.
const bool kRuntimeRegistered = register_device_runtime(
    DeviceType::kCuda,
    {[](MemorySource s) {
       std::lock_guard<std::mutex> lock(source_mu());
       source() = std::move(s);
     },
     [] {
       std::lock_guard<std::mutex> lock(source_mu());
       return source() ? source()->name : std::string("cudaMalloc");
     },
     add_cublaslt_dir, [] { return cublaslt().path; }, [] { return copies_to_host().load(); }});

}  // namespace
}  // namespace onnxtrain::kernels::cuda
